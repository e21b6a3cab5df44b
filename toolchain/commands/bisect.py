"""`toolchain bisect`: which commit of a component, or which change between two locks, broke the stack.

    toolchain bisect --recipe R --component C --good SHA [--bad SHA] (--test smoke | --test-cmd CMD)
    toolchain bisect --good-lock OLD --bad-lock NEW (--test smoke | --test-cmd CMD)
    toolchain bisect --resume [--state FILE]

Glue only: the bisect core (`bisect.py`) and the lock differences (`lockdiff.py`) know nothing of builds.
Here a step's build goes through the build spine (`SpineBuilder`: the recipe with that commit pinned; the
other components come from the wheel cache) and its test is the smoke stage or a command with
`git bisect run` semantics (`CommandTester`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from toolchain.bisect.core import (
    BisectHandler,
    Bisector,
    BisectResult,
    BisectState,
    BuildOutcome,
    Candidate,
    StateFile,
    StepRecord,
    TestOutcome,
    Verdict,
    git_candidates,
    resolve_commit,
    steps_left,
)
from toolchain.console import UI, CommandResult
from toolchain.core.fs import atomic_copy, atomic_write_text
from toolchain.core.proc import CommandTimeout, display, run
from toolchain.errors import BuildError, SourceError, ToolError, UsageError
from toolchain.lock import LOCK_NAME, PYLOCK_NAME, read_lock

DEFAULT_OUT = Path("bisect-out")
STATE_NAME = "bisect-state.json"
DEFAULT_JOBS = 3  # the step's build and, while its test runs, both possible next midpoints
ENV_WHEELS, ENV_LOCK, ENV_COMMIT = "TOOLCHAIN_BISECT_WHEELS", "TOOLCHAIN_BISECT_LOCK", "TOOLCHAIN_BISECT_COMMIT"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("bisect", parents=[common], help="find the commit or lock change that broke the stack",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    one = p.add_argument_group("one component's commits")
    one.add_argument("--recipe", help="recipe name or path")
    one.add_argument("--component", help="the component whose commits are bisected")
    one.add_argument("--good", help="a commit known to work")
    one.add_argument("--bad", help="a commit known to fail (default: the recipe's commit)")
    two = p.add_argument_group("two locks")
    two.add_argument("--good-lock", type=Path, help="a stack.lock.toml (or its directory) that works")
    two.add_argument("--bad-lock", type=Path, help="a stack.lock.toml (or its directory) that fails")
    test = p.add_mutually_exclusive_group()
    test.add_argument("--test", choices=["smoke"], help="run the smoke regression set on each step's build")
    test.add_argument("--test-cmd", metavar="CMD",
                      help=f"a command: exit 0 good, 125 skip, anything else bad; it gets ${ENV_WHEELS}, "
                           f"${ENV_LOCK} and ${ENV_COMMIT}")
    p.add_argument("--smoke-args", metavar="ARGS", default="",
                   help='extra `toolchain smoke` options for --test smoke, e.g. "--cases math,qa"')
    p.add_argument("--test-timeout", type=float, metavar="SECONDS", help="a test running longer counts as bad")
    p.add_argument("--resume", action="store_true", help="continue the bisect saved in the state file")
    p.add_argument("--state", type=Path, help=f"state file (default: OUT/{STATE_NAME})")
    p.add_argument("--out", type=Path, help=f"where builds, logs and results go (default: ./{DEFAULT_OUT})")
    p.add_argument("--jobs", type=int,
                   help="builds at once: the step's and, while its test runs and cores are idle, the possible "
                        f"next ones (default {DEFAULT_JOBS}; 1 = no building ahead; --resume keeps the saved one)")
    p.add_argument("--cache-dir", type=Path, help="mirrors, source trees and wheels (default: $TOOLCHAIN_CACHE_DIR "
                                                  "or ~/.cache/xpu-toolchain)")
    p.add_argument("--mirror", action="append", default=[], metavar="FROM=TO", help="rewrite a URL prefix")
    p.set_defaults(handler=run_bisect)


@dataclass(frozen=True)
class Options:
    """What a bisect needs to start or resume (saved in the state file as `context`)."""
    mode: str                       # "commits" | "locks"
    out: str
    test: str = ""
    test_cmd: tuple[str, ...] = ()
    test_timeout: float | None = None
    smoke_args: tuple[str, ...] = ()
    recipe: str = ""
    component: str = ""
    good: str = ""
    bad: str = ""
    good_lock: str = ""
    bad_lock: str = ""
    cache_dir: str = ""
    mirrors: tuple[str, ...] = field(default=())
    jobs: int = DEFAULT_JOBS


def run_bisect(args: argparse.Namespace, ui: UI) -> CommandResult:
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    state_path = args.state or (args.out or DEFAULT_OUT) / STATE_NAME
    state_file = StateFile(state_path)
    opts = _resumed_options(args, state_file) if args.resume else _new_options(args, state_file)
    if args.jobs is not None:  # saved with the rest: a resume builds ahead only if the bisect did
        opts = replace(opts, jobs=args.jobs)
    resume_argv = ["toolchain", "bisect", "--resume", "--state", str(state_path.resolve())]
    if args.resume:
        state_file.update(context=asdict(opts), resume=resume_argv, done=False)
    else:
        state_file.update(context=asdict(opts), resume=resume_argv, done=False, phases={})
    out = Path(opts.out)
    tester = make_tester(opts, ui)
    report = Report(ui, out / "bisect.log", resume_argv)
    if opts.mode == "commits":
        done = _commit_result(_bisect_commits(opts, opts.jobs, tester, report, state_file, ui), out, state_path,
                              opts)
    else:
        from toolchain.bisect.lockdiff import bisect_locks

        good, bad = read_lock(Path(opts.good_lock)), read_lock(Path(opts.bad_lock))
        base = recipe_of_lock(good)
        result = bisect_locks(
            good, bad, lambda phase, derive, comp: make_lock_builder(phase, derive, base, opts, ui, comp), tester,
            lambda comp, url, g, b: _commit_candidates(base, url, g, b, opts),
            handler_for=report.phase, state_file=state_file, jobs=opts.jobs)
        done = _lock_result(result, out, state_path)
    state_file.update(done=True)
    return done


# ---- options -------------------------------------------------------------------------------------------

def _new_options(args: argparse.Namespace, state_file: StateFile) -> Options:
    doc = state_file.read()
    if doc.get("phases") and not doc.get("done"):
        raise UsageError(f"{state_file.path} holds an unfinished bisect",
                         hint=f"continue it with `toolchain bisect --resume --state {state_file.path}`, or pass "
                              f"another --state/--out to start a new one")
    if not (args.test or args.test_cmd):
        raise UsageError("say how to test each step: --test smoke or --test-cmd CMD")
    test_cmd = tuple(shlex.split(args.test_cmd)) if args.test_cmd else ()
    if args.test_cmd is not None and not test_cmd:
        raise UsageError("--test-cmd is empty")
    from toolchain.sources.mirrors import parse_rewrites

    parse_rewrites(args.mirror)  # checked now, used at every build
    if args.smoke_args and not args.test:
        raise UsageError("--smoke-args goes with --test smoke")
    common = dict(out=str((args.out or DEFAULT_OUT).resolve()), test=args.test or "", test_cmd=test_cmd,
                  test_timeout=args.test_timeout, smoke_args=tuple(shlex.split(args.smoke_args)), cache_dir=str(args.cache_dir.resolve() if args.cache_dir else ""),
                  mirrors=tuple(args.mirror))
    by_lock = args.good_lock or args.bad_lock
    by_commit = [f"--{n}" for n in ("recipe", "component", "good", "bad") if getattr(args, n)]
    if by_lock:
        if not (args.good_lock and args.bad_lock):
            raise UsageError("a lock-to-lock bisect needs both --good-lock and --bad-lock")
        if by_commit:
            raise UsageError(f"{', '.join(by_commit)} cannot be combined with --good-lock/--bad-lock",
                             hint="the locks say which recipe and commits were built")
        return Options(mode="locks", good_lock=str(args.good_lock.resolve()), bad_lock=str(args.bad_lock.resolve()),
                       **common)
    missing = [f"--{n}" for n in ("recipe", "component", "good") if not getattr(args, n)]
    if missing:
        raise UsageError(f"missing {', '.join(missing)}",
                         hint="bisect one component: --recipe R --component C --good SHA [--bad SHA]; "
                              "or two locks: --good-lock OLD --bad-lock NEW")
    from toolchain.recipe.load import recipe_path

    return Options(mode="commits", recipe=str(recipe_path(args.recipe)), component=args.component, good=args.good,
                   bad=args.bad or "", **common)


def _resumed_options(args: argparse.Namespace, state_file: StateFile) -> Options:
    if not state_file.path.is_file():
        raise UsageError(f"no bisect to resume: {state_file.path} does not exist",
                         hint="pass --state FILE (or --out DIR) of the bisect you started")
    given = [f"--{n.replace('_', '-')}" for n in ("recipe", "component", "good", "bad", "good_lock", "bad_lock",
                                                  "test", "test_cmd", "smoke_args") if getattr(args, n)]
    if given:
        raise UsageError(f"--resume continues the saved bisect; {', '.join(given)} cannot change it",
                         hint="drop them, or start a new bisect with another --state/--out")
    ctx = state_file.read().get("context") or {}
    try:
        return Options(**{**ctx, **{k: tuple(ctx.get(k, ())) for k in ("test_cmd", "smoke_args", "mirrors")}})
    except TypeError as exc:
        raise UsageError(f"{state_file.path}: the saved options are unreadable ({exc})",
                         hint="start the bisect again") from None


def cache_dir(opts: Options) -> Path:
    from toolchain.build.cache import default_cache_dir

    return Path(opts.cache_dir) if opts.cache_dir else default_cache_dir().resolve()


# ---- one component's commits ---------------------------------------------------------------------------

def _bisect_commits(opts: Options, jobs: int, tester: Any, report: Report, state_file: StateFile,
                    ui: UI) -> BisectResult:
    from toolchain.recipe import load as recipes

    base = recipes.load_recipe(opts.recipe)
    comp = base.component(opts.component)
    if not opts.bad:  # the recipe's commit, kept: a resume must not follow a later `toolchain update`
        opts = replace(opts, bad=comp.commit)
        state_file.update(context=asdict(opts))
    cands = _commit_candidates(base, comp.url, opts.good, opts.bad, opts, pinned=comp.commit)
    builder = SpineBuilder(lambda sha: recipes.with_commit(base, comp.name, sha), Path(opts.out) / "steps",
                           cache_dir(opts), opts.mirrors, ui, component=comp.name)
    return Bisector(cands, builder, tester, report.phase("commits"), state=state_file.load("commits"),
                    persist=state_file.saver("commits"), jobs=jobs).run()


def _commit_candidates(recipe: Any, url: str, good: str, bad: str, opts: Options,
                       pinned: str = "") -> tuple[Candidate, ...]:
    """First-parent commits good..bad from the component's mirror (fetched when a commit is missing)."""
    from toolchain.sources.mirrors import Mirrors, parse_rewrites
    from toolchain.sources.rewrites import recipe_rewrites

    cache = cache_dir(opts)
    mirrors = Mirrors(cache, recipe_rewrites(recipe, cache) + parse_rewrites(opts.mirrors))
    repo = mirrors.ensure(url, pinned or bad)
    for rev in (good, bad):
        try:
            resolve_commit(repo, rev)
        except SourceError:
            repo = mirrors.ensure(url, rev)
    return git_candidates(repo, good, bad, url)


class SpineBuilder:
    """Builds `derive(key)` (a Recipe) through the build spine into `<out_root>/<key>`; components that did
    not change come from the wheel cache. Thread-safe for distinct keys: each build has its own directory;
    mirrors, source trees and the cache are safe for concurrent builders. A build or source failure makes
    the candidate unbuildable (a skip); a build failure is remembered, so a repeated bisect compiles nothing."""

    def __init__(self, derive: Callable[[str], Any], out_root: Path, cache: Path, mirrors: Sequence[str],
                 ui: UI, *, component: str = "") -> None:
        self.derive, self.out_root, self.cache, self.mirrors, self.ui = derive, out_root, cache, tuple(mirrors), ui
        self.component = component  # the one whose commit changes (commit bisects)

    def build(self, key: str) -> BuildOutcome:
        from toolchain.build.cache import WheelCache
        from toolchain.build.stack import BuildOptions
        from toolchain.pipeline import build_stack
        from toolchain.sources.mirrors import parse_rewrites

        out = self.out_root / key[:12]
        ui = self.ui if threading.current_thread() is threading.main_thread() else UI(quiet=True)
        recipe = self.derive(key)
        memo = self.cache / "bisect" / "unbuildable" / f"{_recipe_digest(recipe)}.txt"
        if memo.is_file():
            return BuildOutcome(False, log=out / "logs", cached=True,
                                reason=f"{memo.read_text().strip()} (remembered: delete {memo} to build it again)")
        started = time.time()
        options = BuildOptions(out_dir=out, cache_dir=self.cache, rewrites=parse_rewrites(self.mirrors),
                               verbose=ui.verbose)
        try:
            lock = build_stack(recipe, options, ui)
        except (SourceError, BuildError) as err:  # e.g. a patch that does not apply, a compile error
            self._check_upstream(recipe, err)
            if not isinstance(err, SourceError):
                atomic_write_text(memo, _first_line(err) + "\n")
            return BuildOutcome(False, log=out / "logs", reason=_first_line(err))
        cache = WheelCache(self.cache)
        entries = [cache.get(c.cache_key) for c in lock.components]
        cached = all(e is not None and e.meta.get("stored", started) < started for e in entries)
        return BuildOutcome(True, lock_path=lock.path, wheels=tuple(lock.wheel_path(c) for c in lock.components),
                            log=out / "logs", cached=cached)

    def _check_upstream(self, recipe: Any, err: Exception) -> None:
        """A component built before the bisected one cannot fail because of its commit: stop, not skip."""
        names = [c.name for c in recipe.components]
        failed = getattr(err, "component", None) or failed_component(str(err), names)
        if self.component and failed and names.index(failed) < names.index(self.component):
            raise BuildError(f"{failed} does not build, and it is built before {self.component} (whose commit is "
                             f"all that changes here), so no commit of {self.component} can be tested: "
                             f"{_first_line(err)}",
                             hint=f"make the recipe build as it is (`toolchain build --recipe {recipe.path}`), "
                                  "then bisect again") from None


def failed_component(message: str, names: Sequence[str]) -> str:
    """The component a spine error names ("kern@1a2b...", "components.kern", "kern: ...", "building kern ")."""
    for name in sorted(names, key=len, reverse=True):
        if any(p in message for p in (f"{name}@", f"components.{name}.", f"building {name} ")) \
                or message.startswith(f"{name}:"):
            return name
    return ""


def _recipe_digest(recipe: Any) -> str:
    """What a build's outcome depends on, as far as the recipe says: its resolved text and its patches."""
    from toolchain.core.fs import sha256_bytes

    parts = [recipe.text]
    for comp in recipe.components:
        for patch in comp.patches:
            path = recipe.patches_dir / patch
            parts.append(f"{patch}\0{path.read_bytes().hex() if path.is_file() else ''}")
    return sha256_bytes("\n".join(parts).encode())


def recipe_of_lock(lock: Any) -> Any:
    """The recipe a lock was built from (its recorded text; patches from <recipe dir>/../patches)."""
    from toolchain.recipe import load as recipes

    path = Path(lock.recipe_path)
    return recipes.load_recipe_text(lock.recipe_text, lock.recipe_name, path, path.parent.parent / "patches")


def make_lock_builder(phase: str, derive: Callable[[str], dict[str, Any]], base: Any, opts: Options,
                      ui: UI, component: str = "") -> SpineBuilder:
    """A lock-to-lock phase's builder: `derive(key)` is a recipe table, read like the good lock's recipe."""
    from toolchain.recipe import load as recipes

    def to_recipe(key: str) -> Any:
        return recipes.from_data(derive(key), name=base.name, path=base.path, patches_dir=base.patches_dir)

    return SpineBuilder(to_recipe, Path(opts.out) / phase, cache_dir(opts), opts.mirrors, ui, component=component)


# ---- testing a step ------------------------------------------------------------------------------------

def make_tester(opts: Options, ui: UI) -> Any:
    logs = Path(opts.out) / "tests"
    if opts.test_cmd:
        return CommandTester(opts.test_cmd, logs, timeout=opts.test_timeout, verbose=ui.verbose)
    return SmokeTester(logs, opts.smoke_args, ui)


class CommandTester:
    """`git bisect run` semantics: exit 0 good, 125 skip, anything else bad (a crash and a timeout too)."""

    def __init__(self, argv: Sequence[str], logs: Path, *, timeout: float | None = None, verbose: bool = False) -> None:
        self.argv, self.logs, self.timeout, self.verbose = tuple(argv), logs, timeout, verbose

    def test(self, cand: Candidate, build: BuildOutcome) -> TestOutcome:
        env = {**os.environ, ENV_WHEELS: os.pathsep.join(str(w) for w in build.wheels),
               ENV_LOCK: str(build.lock_path or ""), ENV_COMMIT: cand.key}
        log = self.logs / f"{cand.key[:12]}.log"
        try:
            done = run(self.argv, env=env, log=log, check=False, verbose=self.verbose, timeout=self.timeout)
        except CommandTimeout as err:
            return TestOutcome(Verdict.BAD, f"test timed out after {err.timeout:g}s", log)
        if not done.started:  # the program could not be started at all
            raise UsageError(f"--test-cmd cannot run: {done.stderr.strip()}",
                             hint=f"check that {self.argv[0]!r} exists and is executable (or on PATH)")
        code = done.returncode
        if code == 0:
            return TestOutcome(Verdict.GOOD, "test exited 0", log)
        if code == 125:
            return TestOutcome(Verdict.SKIP, "test exited 125 (cannot test this one)", log)
        if code < 0:
            return TestOutcome(Verdict.BAD, f"test killed by signal {-code}", log)
        return TestOutcome(Verdict.BAD, f"test exited {code}", log)


class SmokeTester:
    """The smoke regression set (`toolchain smoke`) on each step's lock."""

    def __init__(self, logs: Path, extra: Sequence[str], ui: UI) -> None:
        self.logs, self.extra, self.ui = logs, tuple(extra), ui

    def test(self, cand: Candidate, build: BuildOutcome) -> TestOutcome:
        if build.lock_path is None:
            raise UsageError("--test smoke needs a lock for each step; this build produced none")
        return smoke_verdict(build.lock_path, self.logs / cand.key[:12], self.extra, self.ui)


def smoke_verdict(lock_path: Path, out_dir: Path, extra: Sequence[str], ui: UI) -> TestOutcome:
    """Adapter to the smoke stage (issue 4): `toolchain smoke --lock L --out D EXTRA`, run in this process
    and imported only here. Passed: good; failed (exit 1): bad; bad input (exit 2): the bisect stops."""
    from toolchain.cli import build_parser

    try:
        args = build_parser().parse_args(["smoke", "--lock", str(lock_path), "--out", str(out_dir), *extra])
    except UsageError as err:
        raise UsageError(f"--test smoke: {err}", hint="check --smoke-args (see `toolchain smoke --help`)") from None
    try:
        result = args.handler(args, UI(quiet=not ui.verbose, verbose=ui.verbose))
    except ToolError as err:
        if err.return_code != 1:
            raise
        return TestOutcome(Verdict.BAD, f"smoke: {_first_line(err)}", out_dir)
    if result.exit_code == 0:
        return TestOutcome(Verdict.GOOD, "smoke passed", out_dir)
    return TestOutcome(Verdict.BAD, "smoke failed: " + smoke_failures(result.data), out_dir)


def smoke_failures(data: dict[str, Any]) -> str:
    """What failed, from `toolchain smoke --json` data: cases not passed, findings, a server never ready."""
    parts = []
    for run_ in data.get("runs") or ():
        if not run_.get("ready", {}).get("ok", True):
            parts.append(f"server not ready ({run_['ready'].get('reason', '')})")
        parts += [f"{name}={verdict}" for name, verdict in run_.get("cases", {}).items()
                  if verdict not in ("pass", "skip")]
        parts += [f"finding {f}" for f in run_.get("findings", ())]
    return ", ".join(parts) or "see the smoke report"


# ---- reporting -----------------------------------------------------------------------------------------

class Report:
    """Reports every event as it happens (terminal and `<out>/bisect.log`); tells how to resume."""

    def __init__(self, ui: UI, log: Path, resume_argv: Sequence[str]) -> None:
        self.ui, self.log, self.resume_argv = ui, log, tuple(resume_argv)

    def phase(self, name: str) -> PhaseHandler:
        return PhaseHandler(self, name)

    def line(self, text: str, *, warn: bool = False) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")
        (self.ui.warn if warn else self.ui.info)(escape(text))


class PhaseHandler(BisectHandler):
    def __init__(self, report: Report, phase: str) -> None:
        self.r, self.phase = report, phase

    def started(self, state: BisectState) -> None:
        n, pending = len(state.candidates) - 2, state.pending()
        self.r.line(f"[{self.phase}] {n} candidates between good and bad; {pending} untested, "
                    f"about {steps_left(pending)} steps")

    def building(self, cand: Candidate) -> None:
        self.r.line(f"[{self.phase}] building {_name(cand)}")

    def prefetching(self, cand: Candidate) -> None:
        self.r.line(f"[{self.phase}] building {_name(cand)} ahead (a possible next step)")

    def testing(self, cand: Candidate) -> None:
        self.r.line(f"[{self.phase}] testing {_name(cand)}")

    def step(self, record: StepRecord, state: BisectState) -> None:
        self.r.line(f"[{self.phase}] step {record.number}: {record.key[:12]} is {record.verdict.value} "
                    f"({record.reason}){_left(record.remaining)}")

    def skip(self, record: StepRecord, state: BisectState) -> None:
        self.r.line(f"[{self.phase}] step {record.number}: skipping {record.key[:12]}: {record.reason}"
                    f"{_left(record.remaining)}", warn=True)

    def finished(self, result: BisectResult) -> None:
        what = _name(result.first_bad) if result.first_bad else \
            "one of " + ", ".join(c.key[:12] for c in result.possible)
        self.r.line(f"[{self.phase}] done after {len(result.steps)} steps: first bad is {what}")

    def interrupted(self, state: BisectState, error: BaseException) -> None:
        lo, hi = state.bounds()
        why = "interrupted" if isinstance(error, KeyboardInterrupt) else f"stopped ({_first_line(error)})"
        self.r.line(f"[{self.phase}] bisect {why} after {len(state.steps)} steps; the first bad is between "
                    f"{state.candidates[lo].key[:12]} (good) and {state.candidates[hi].key[:12]} (bad)", warn=True)
        self.r.ui.err.print(f"resume with: {display(self.r.resume_argv)}", markup=False, highlight=False,
                            soft_wrap=True)


def _commit_result(result: BisectResult, out: Path, state_path: Path, opts: Options) -> CommandResult:
    locks = publish_ends(result, out)
    lines = []
    if result.first_bad:
        c = result.first_bad
        lines.append(f"first bad commit of {opts.component}: {c.key}\n  {c.subject}\n  {c.date}"
                     + (f"\n  {c.url}" if c.url else ""))
        if c.merge:
            lines.append(f"  it is a merge: bisect its branch with --good {c.key[:12]}^1 --bad {c.key[:12]}")
    else:
        lines.append("skipped commits hide the first bad commit; it is one of:\n"
                     + "\n".join(f"  {_name(c)}" for c in result.possible))
    lines += _skipped_lines(result) + [f"{k} lock: {v}" for k, v in locks.items()] + [f"state: {state_path}"]
    data = {"ok": result.found, "mode": "commits", "component": opts.component, "result": result.to_dict(),
            "locks": locks, "state": str(state_path), "log": str(out / "bisect.log")}
    atomic_write_text(out / "result.json", _json(data))
    return CommandResult(data, 0 if result.found else 1, escape("\n".join(lines)), (steps_table(result, "commit"),))


def _lock_result(result: Any, out: Path, state_path: Path) -> CommandResult:
    final = result.commits or result.changes
    locks = publish_ends(final, out)
    lines = [f"note: {n}" for n in result.notes]
    if result.culprit is None:
        lines.append("skipped steps hide the change; it is one of:\n"
                     + "\n".join(f"  {d.label}" for d in result.possible))
    else:
        lines.append(f"the change that turns good into bad: {result.culprit.label}")
    if result.commits is not None:
        c = result.commits.first_bad
        lines.append(f"first bad commit of {result.culprit.component}: {c.key}  {c.subject}  {c.date}  {c.url}"
                     if c else "skipped commits hide the first bad commit; it is one of: "
                     + ", ".join(x.key[:12] for x in result.commits.possible))
    lines += _skipped_lines(final) + [f"{k} lock: {v}" for k, v in locks.items()] + [f"state: {state_path}"]
    ok = result.culprit is not None and (result.commits is None or result.commits.found)
    data = {"ok": ok, "mode": "locks", "result": result.to_dict(), "locks": locks, "state": str(state_path),
            "log": str(out / "bisect.log")}
    atomic_write_text(out / "result.json", _json(data))
    tables = [differences_table(result), steps_table(result.changes, "change")]
    if result.commits is not None:
        tables.append(steps_table(result.commits, "commit"))
    return CommandResult(data, 0 if ok else 1, escape("\n".join(lines)), tuple(tables))


def _skipped_lines(result: BisectResult) -> list[str]:
    if not result.skipped:
        return []
    return ["skipped:"] + [f"  {c.key[:12]} {c.subject}: {why}" for c, why in result.skipped]


def steps_table(result: BisectResult, what: str) -> Table:
    table = Table(title=f"bisect steps ({what})")
    for col in ("step", what, "verdict", "why", "build s", "test s"):
        table.add_column(col)
    subjects = {c.key: c.subject for c in (result.last_good, *result.possible)}
    subjects.update({c.key: c.subject for c, _ in result.skipped})
    for s in result.steps:
        build = "failed" if s.build_failed else ("cached" if s.cached else f"{s.build_seconds:.1f}")
        table.add_row(str(s.number), escape(f"{s.key[:12]} {subjects.get(s.key, '')}".strip()), s.verdict.value,
                      escape(s.reason), build + (" (ahead)" if s.prefetched else ""), f"{s.test_seconds:.1f}")
    return table


def differences_table(result: Any) -> Table:
    table = Table(title="differences between the locks (applied in this order)")
    for col in ("#", "kind", "change"):
        table.add_column(col)
    for i, d in enumerate(result.differences, 1):
        table.add_row(str(i), d.kind, escape(d.label))
    return table


def publish_ends(result: BisectResult, out: Path) -> dict[str, str]:
    """Copy the last good and first bad builds (lock + wheels) to <out>/good and <out>/bad."""
    done = {}
    for name, build in (("good", result.good_build), ("bad", result.bad_build)):
        if build is not None and build.ok and build.lock_path and Path(build.lock_path).is_file():
            done[name] = str(copy_lock_dir(Path(build.lock_path), out / name) / LOCK_NAME)
    return done


def copy_lock_dir(lock_path: Path, dest: Path) -> Path:
    lock = read_lock(lock_path)
    tmp = dest.with_name(f".tmp-{dest.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    atomic_copy(lock.path, tmp / LOCK_NAME)
    if (lock.path.parent / PYLOCK_NAME).is_file():
        atomic_copy(lock.path.parent / PYLOCK_NAME, tmp / PYLOCK_NAME)
    for c in lock.components:
        src = lock.wheel_path(c)
        if src.is_file():
            atomic_copy(src, tmp / "wheels" / src.name)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return dest


def _left(pending: int) -> str:
    if not pending:
        return ""
    n = steps_left(pending)
    return f"; {pending} left to test, about {n} more step{'s' if n != 1 else ''}"


def _name(cand: Candidate | None) -> str:
    return "" if cand is None else f"{cand.key[:12]} {cand.subject}".strip()


def _first_line(err: BaseException | str) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _json(data: dict[str, Any]) -> str:
    import json

    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
