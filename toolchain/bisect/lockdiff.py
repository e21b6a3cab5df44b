"""Lock-to-lock bisect: which single change between a good and a bad lock turns good into bad?

A lock records the resolved recipe it was built from. `lock_differences(good, bad)` lists every difference
between the two, one at a time and in dependency order: stack-wide settings (toolchain, target, build env),
then per component in install order its commit, patches, env (one variable at a time), command and other
settings, then the smoke serve env (one variable at a time), serve args (one option at a time) and other
smoke settings. Candidate `d<i>` is the good recipe with the first i differences applied, so `d0` is the
good side and `d<k>` the bad one; the bisect core finds the first bad `d<i>`: difference i is the change
that turns good into bad. When it is a commit change, `bisect_locks` hands that component's commit range
(with the other differences before it applied) to the core.

Differences that a recipe cannot express (the oneAPI version or torch found on the machine, the host each
lock was built on: kernel, GPUs, driver, Level Zero, compute runtime; a patch file whose content changed) are
reported as notes beside the recipe differences, not applied.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from toolchain.bisect.candidates import CommitRange, adjacent_good
from toolchain.bisect.core import (
    BisectHandler,
    Bisector,
    BisectResult,
    BisectState,
    Builder,
    BuildOutcome,
    Candidate,
    Tester,
)
from toolchain.bisect.state import StateFile
from toolchain.core import toml as tomlio
from toolchain.core.record import field, record
from toolchain.core.serial import Data, meta, to_table
from toolchain.errors import RecipeError
from toolchain.lock import Lock


class _Missing:
    def __repr__(self) -> str:
        return "(unset)"


MISSING: Any = _Missing()

STACK_TABLES = ("toolchain", "target")
COMPONENT_ORDER = ("commit", "patches", "env", "command")  # then every other key, as "setting"
IGNORED_COMPONENT_KEYS = ("ref",)  # informational; the commit is what is built
SMOKE_ORDER = ("env", "serve-args")  # then every other key, as "smoke"
ENV_FACTS = (("toolchain", "oneapi_version", "oneAPI version"), ("target", "python_version", "Python version"),
             ("target", "torch_version", "torch version"), ("target", "torch_xpu", "torch XPU"),
             ("target", "image_digest", "image digest"), ("target", "platform", "platform"))


def _present(value: Any) -> Any:
    return None if value is MISSING else value


@record
class Difference:
    """One change between two locks (a commit, patch set, env value, setting ...) that can be applied alone."""
    kind: str                 # toolchain|target|build-env|component|commit|patches|env|command|setting|
                              # serve-env|serve-args|smoke
    path: tuple[str, ...] = field(metadata=meta(dump=".".join))  # where in the recipe table (written dotted)
    good: Any = field(metadata=meta(dump=_present))  # MISSING when the good side does not set it (written null)
    bad: Any = field(metadata=meta(dump=_present))
    component: str = ""
    option: str = ""          # serve-args: the option this difference adds, changes or removes

    @property
    def label(self) -> str:
        """The difference as a report line: what changed where, from the good value to the bad one."""
        where = ".".join(self.path) + (f" {self.option or '(positional)'}" if self.kind == "serve-args" else "")
        if self.kind == "commit":
            return f"{self.component}: commit {str(self.good)[:12]} -> {str(self.bad)[:12]}"
        return f"{where}: {_show(self.good)} -> {_show(self.bad)}"

    def apply(self, data: dict[str, Any]) -> dict[str, Any]:
        """A copy of the recipe table `data` with this difference changed to the bad side."""
        out = copy.deepcopy(data)
        if self.kind == "serve-args":
            smoke = out.setdefault("smoke", {})
            groups = option_groups(smoke.get("serve-args", []))
            if self.bad is MISSING:
                groups.pop(self.option, None)
            else:
                groups[self.option] = list(self.bad)
            smoke["serve-args"] = [tok for toks in groups.values() for tok in toks]
            return out
        table = out
        for key in self.path[:-1]:
            table = table.setdefault(key, {})
        if self.bad is MISSING:
            table.pop(self.path[-1], None)
        else:
            table[self.path[-1]] = copy.deepcopy(self.bad)
        return out

    def to_dict(self) -> dict[str, Data]:
        """The report's table: the fields and the `label` a person reads."""
        return {**to_table(self), "label": self.label}


def stack_data(lock: Lock) -> dict[str, Any]:
    """The resolved recipe table a lock was built from, with the commits the lock records."""
    if not lock.recipe_text.strip():
        raise RecipeError(f"{lock.path}: the lock records no recipe text, so it cannot be rebuilt or compared",
                          hint="rebuild it with a current `toolchain build`")
    try:
        data = tomlio.loads(lock.recipe_text)
    except tomlio.TOMLDecodeError as exc:
        raise RecipeError(f"{lock.path}: [recipe] text is not valid TOML: {exc}") from None
    comps = data.setdefault("components", {})
    for c in lock.components:
        comps.setdefault(c.name, {})["commit"] = c.commit
    return data


def lock_differences(good: Lock, bad: Lock) -> tuple[Difference, ...]:
    """Every difference between the stacks of a good and a bad lock, in the order bisect applies them."""
    g, b = stack_data(good), stack_data(bad)
    diffs: list[Difference] = []
    for table in STACK_TABLES:
        diffs += _table_diffs(g.get(table, {}), b.get(table, {}), (table,), table)
    diffs += _table_diffs(g.get("env", {}), b.get("env", {}), ("env",), "build-env")
    gc, bc = g.get("components", {}), b.get("components", {})
    for name in component_order(good, bad):
        diffs += _component_diffs(name, gc.get(name, MISSING), bc.get(name, MISSING))
    gs, bs = g.get("smoke", {}), b.get("smoke", {})
    diffs += _table_diffs(gs.get("env", {}), bs.get("env", {}), ("smoke", "env"), "serve-env")
    diffs += _serve_arg_diffs(gs.get("serve-args", []), bs.get("serve-args", []))
    rest = [k for k in _keys(gs, bs) if k not in SMOKE_ORDER]
    diffs += _pick_diffs(gs, bs, rest, ("smoke",), "smoke")
    return tuple(diffs)


def component_order(good: Lock, bad: Lock) -> list[str]:
    """Install (dependency) order: the good lock's, then components only the bad lock has."""
    names = [c.name for c in good.components]
    return names + [c.name for c in bad.components if c.name not in names]


def environment_notes(good: Lock, bad: Lock) -> list[str]:
    """Differences a recipe cannot express, so they are reported and not bisected."""
    notes = []
    for section, attr, what in ENV_FACTS:
        gv, bv = getattr(getattr(good, section), attr), getattr(getattr(bad, section), attr)
        if gv != bv:
            notes.append(f"{what} differs: {gv or '(none)'} -> {bv or '(none)'} (not swapped: it is the "
                         f"build machine's, not the recipe's)")
    for key in _keys(good.host, bad.host):  # the box each was built on (toolchain.target.hostfacts)
        gv, bv = good.host.get(key, ""), bad.host.get(key, "")
        if gv != bv:
            notes.append(f"host {key} differs: {_show(gv) if gv not in ('', []) else '(none)'} -> "
                         f"{_show(bv) if bv not in ('', []) else '(none)'} (the box, not the recipe: not swapped)")
    gp = {(c.name, p.label): p.sha256 for c in good.components for p in c.patches}
    for c in bad.components:
        for p in c.patches:
            old = gp.get((c.name, p.label))
            if old and old != p.sha256:
                notes.append(f"{c.name}: patch {p.label} changed content ({old[:12]} -> {p.sha256[:12]}); "
                             f"only the version on disk can be built")
    return notes


def prefix_data(base: dict[str, Any], diffs: Sequence[Difference], count: int) -> dict[str, Any]:
    """The good lock's stack table with the first `count` differences applied."""
    data = base
    for diff in diffs[:count]:
        data = diff.apply(data)
    return data


def prefix_candidates(diffs: Sequence[Difference]) -> tuple[Candidate, ...]:
    """The candidates of a lock-to-lock bisect: d0 (no difference applied), then one per difference added."""
    first = Candidate("d0", "the good lock, no difference applied")
    return (first, *tuple(Candidate(f"d{i}", f"+ {d.label}") for i, d in enumerate(diffs, 1)))


def prefix_count(key: str) -> int:
    """How many differences the candidate key `dN` applies (N)."""
    return int(key[1:])


def option_groups(args: Sequence[str]) -> dict[str, list[str]]:
    """Serve args by option: `--opt value...` (and `--opt=value`) under "--opt"; leading positionals under ""."""
    groups: dict[str, list[str]] = {}
    current = ""
    for tok in args:
        if tok.startswith("-") and len(tok) > 1 and not _is_number(tok):
            current = tok.split("=", 1)[0]
            groups[current] = [tok]
        else:
            groups.setdefault(current, []).append(tok)
    return groups


# ---- the two phases -----------------------------------------------------------------------------------

def _table(value: Difference | BisectResult | None) -> Data:
    return None if value is None else value.to_dict()


def _tables(values: tuple[Difference, ...]) -> Data:
    return [d.to_dict() for d in values]


@record
class LockBisectResult:
    """A lock-to-lock bisect: the differences, which one turns good into bad, and the commit bisect within it."""
    differences: tuple[Difference, ...] = field(metadata=meta(dump=_tables))
    notes: tuple[str, ...]
    changes: BisectResult = field(metadata=meta(dump=_table))  # phase 1: which change
    culprit: Difference | None = field(metadata=meta(dump=_table))  # the change that turns good into bad
    possible: tuple[Difference, ...] = field(metadata=meta(dump=_tables))  # when skips hide it: one of these
    commits: BisectResult | None = field(metadata=meta(dump=_table))  # phase 2, when the culprit is a commit change

    def to_dict(self) -> dict[str, Any]:  # (Any: read back by key, nested)
        """The report's table: each difference and result as its own `to_dict` writes it."""
        return to_table(self)


MakeBuilder = Callable[[str, Callable[[str], dict[str, Any]], str], Builder]
"""(phase, key -> recipe table, the component whose commit changes or "") -> a builder for that phase."""

CommitCandidates = Callable[[str, str, str, str], CommitRange]
"""(component, url, good commit, bad commit) -> the commit candidates and every commit of the range
(`bisect.candidates.component_candidates`)."""


def bisect_locks(good: Lock, bad: Lock, make_builder: MakeBuilder, tester: Tester,
                 commit_candidates: CommitCandidates, *, handler_for: Callable[[str], BisectHandler] | None = None,
                 state_file: StateFile | None = None, jobs: int = 1,
                 idle: Callable[[], float] | None = None, check_ends: bool = False) -> LockBisectResult:
    """Phase "changes": bisect the cumulative differences; phase "commits": bisect the culprit's commits.
    The two locks are the builds of the ends of phase "changes", and its ends those of phase "commits".
    `check_ends`: test the two locks first (good must test good, bad bad); phase "commits" needs no check,
    its ends are phase "changes"'s last good and first bad, tested there; its result's last good is the first
    bad's parent (`adjacent_good`), as a commit bisect names it."""
    diffs = lock_differences(good, bad)
    notes = tuple(environment_notes(good, bad))
    if not diffs:
        raise RecipeError(f"{good.path} and {bad.path} build the same stack: nothing to bisect"
                          + (f" ({'; '.join(notes)})" if notes else ""),
                          hint="the difference is outside the recipes; compare the machines (see the notes)")
    base = stack_data(good)
    cands = prefix_candidates(diffs)
    changes = _run_phase("changes", cands, make_builder("changes", lambda key: prefix_data(
        base, diffs, prefix_count(key)), ""), tester, handler_for, state_file, jobs, idle,
        {cands[0].key: lock_outcome(good), cands[-1].key: lock_outcome(bad)}, check_ends)
    possible = tuple(diffs[prefix_count(c.key) - 1] for c in changes.possible)
    culprit = possible[0] if len(possible) == 1 else None
    commits = None
    if culprit is not None and culprit.kind == "commit":
        before = prefix_data(base, diffs, diffs.index(culprit))
        url = before["components"][culprit.component].get("url", "")
        found = commit_candidates(culprit.component, url, culprit.good, culprit.bad)
        ccands = found.candidates

        def commit_data(sha: str) -> dict[str, Any]:
            return Difference("commit", culprit.path, culprit.good, sha, culprit.component).apply(before)

        seeds = {k: b for k, b in ((ccands[0].key, changes.good_build), (ccands[-1].key, changes.bad_build)) if b}
        commits = adjacent_good(_run_phase("commits", ccands, make_builder("commits", commit_data, culprit.component),
                                           tester, handler_for, state_file, jobs, idle, seeds), found.everyone)
    return LockBisectResult(diffs, notes, changes, culprit, possible, commits)


def lock_outcome(lock: Lock) -> BuildOutcome:
    """An existing lock as the build of a candidate."""
    return BuildOutcome(True, lock_path=lock.path, wheels=tuple(lock.wheel_path(c) for c in lock.components),
                        cached=True)


def _run_phase(phase: str, cands: Sequence[Candidate], builder: Builder, tester: Tester,
               handler_for: Callable[[str], BisectHandler] | None, state_file: StateFile | None, jobs: int,
               idle: Callable[[], float] | None, seeds: dict[str, BuildOutcome],
               check_ends: bool = False) -> BisectResult:
    state: BisectState | None = state_file.load(phase) if state_file else None
    return Bisector(cands, builder, tester, handler_for(phase) if handler_for else None, state=state,
                    persist=state_file.saver(phase) if state_file else None, jobs=jobs, idle=idle,
                    builds=seeds, check_ends=check_ends).run()


# ---- diffing helpers ----------------------------------------------------------------------------------

def _component_diffs(name: str, g: Any, b: Any) -> list[Difference]:
    path = ("components", name)
    if g is MISSING or b is MISSING:
        return [Difference("component", path, g, b, name)]
    out = []
    for key in COMPONENT_ORDER:
        if key == "env":
            out += _table_diffs(g.get("env", {}), b.get("env", {}), (*path, "env"), "env", name)
        elif key == "commit":
            if g.get("commit") != b.get("commit"):
                out.append(Difference("commit", (*path, "commit"), g.get("commit"), b.get("commit"), name))
        else:
            out += _pick_diffs(g, b, [key], path, key, name)
    rest = [k for k in _keys(g, b) if k not in COMPONENT_ORDER and k not in IGNORED_COMPONENT_KEYS]
    return out + _pick_diffs(g, b, rest, path, "setting", name)


def _table_diffs(g: dict[str, Any], b: dict[str, Any], path: tuple[str, ...], kind: str,
                 component: str = "") -> list[Difference]:
    return _pick_diffs(g, b, _keys(g, b), path, kind, component)


def _pick_diffs(g: dict[str, Any], b: dict[str, Any], keys: Sequence[str], path: tuple[str, ...], kind: str,
                component: str = "") -> list[Difference]:
    out = []
    for k in keys:
        gv, bv = g.get(k, MISSING), b.get(k, MISSING)
        if gv != bv:
            out.append(Difference(kind, (*path, k), gv, bv, component))
    return out


def _serve_arg_diffs(g: Sequence[str], b: Sequence[str]) -> list[Difference]:
    gg, bg = option_groups(g), option_groups(b)
    out = []
    for opt in _keys(gg, bg):
        gv, bv = gg.get(opt, MISSING), bg.get(opt, MISSING)
        if gv != bv:
            out.append(Difference("serve-args", ("smoke", "serve-args"), gv, bv, option=opt))
    return out


def _keys(g: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return list(g) + [k for k in b if k not in g]


def _is_number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _show(value: Any) -> str:
    if value is MISSING:
        return "(unset)"
    if isinstance(value, list):
        return " ".join(str(v) for v in value) if all(isinstance(v, str) for v in value) else repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_show(v)}" for k, v in value.items()) + "}"
    return repr(value) if isinstance(value, str) else str(value)
