"""`--ladder`: the same regression set over configurations that each add one optimization to the last.

Default steps: eager (--enforce-eager, ESIMD GDN out-projection disabled) → + FP8 KV cache → + XPU graph
(no --enforce-eager) → + GDN optimization (DISABLE_ESIMD_GDN_OUTPROJ unset). A recipe replaces them with
`[[smoke.ladder]]` tables: name, title, args (flag = true to add, false to remove, "value" to set), env,
unset-env. The ladder stops at the first step that breaks and reports how.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from toolchain.core.record import field, record
from toolchain.core.serial import Data, empty_as_null, meta, to_data, to_table
from toolchain.errors import RecipeError


class StepRun(Protocol):
    """What the ladder reads of one step's run (a runner.RunResult)."""

    @property
    def name(self) -> str:
        """The run's name in the report."""

    @property
    def passed(self) -> bool:
        """Whether the server became ready and every required case passed."""

    def how(self) -> str:
        """One line: what broke in the run and the first diagnosis."""


@record
class LadderStep:
    """One step of the fallback ladder: server flags and environment to add or remove when serving fails."""
    name: str
    title: str
    args: Mapping[str, Any] = field(default_factory=dict)   # flag -> True | False | "value"
    env: Mapping[str, str] = field(default_factory=dict)
    unset_env: tuple[str, ...] = ()


DEFAULT_LADDER = (
    LadderStep("eager", "eager: --enforce-eager, ESIMD GDN out-projection off",
               {"--enforce-eager": True}, {"DISABLE_ESIMD_GDN_OUTPROJ": "1"}),
    LadderStep("fp8-kv", "+ FP8 KV cache", {"--kv-cache-dtype": "fp8"}),
    LadderStep("xpu-graph", "+ XPU graph (no --enforce-eager)", {"--enforce-eager": False}),
    LadderStep("gdn", "+ GDN optimization (ESIMD out-projection on)", unset_env=("DISABLE_ESIMD_GDN_OUTPROJ",)),
)


def steps_from(raw: Sequence[Mapping[str, Any]] | None, where: str = "[smoke.ladder]") -> tuple[LadderStep, ...]:
    """The ladder steps of a recipe's [smoke.ladder] tables (the default ladder when None)."""
    if raw is None:
        return DEFAULT_LADDER
    steps, problems = [], []
    for i, table in enumerate(raw):
        unknown = sorted(set(table) - {"name", "title", "args", "env", "unset-env"})
        problems += [f"{where} #{i + 1}: unknown key {k!r}" for k in unknown]
        if "name" not in table:
            problems.append(f"{where} #{i + 1}: missing name")
            continue
        bad = [k for k, v in dict(table.get("args", {})).items() if not isinstance(v, (bool, str))]
        problems += [f"{where}.{table['name']}: args.{k} must be true, false or a string" for k in bad]
        steps.append(LadderStep(str(table["name"]), str(table.get("title", table["name"])),
                                dict(table.get("args", {})), {k: str(v) for k, v in dict(table.get("env", {})).items()},
                                tuple(table.get("unset-env", ()))))
    if problems or not steps:
        raise RecipeError(problems or [f"{where}: no steps"])
    return tuple(steps)


def apply_args(argv: Sequence[str], args: Mapping[str, Any]) -> list[str]:
    """The serve argv with a step's flags set (True), removed (False) or given a value."""
    out = list(argv)
    for flag, value in args.items():
        if value is True:
            if flag not in out:
                out.append(flag)
        elif value is False:
            out = [a for a in out if a != flag and not a.startswith(flag + "=")]
        else:
            out = [*_without_valued(out, flag), flag, str(value)]
    return out


def _without_valued(argv: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == flag:
            skip = True
            continue
        if not a.startswith(flag + "="):
            out.append(a)
    return out


def apply(argv: Sequence[str], env: Mapping[str, str], step: LadderStep) -> tuple[list[str], dict[str, str]]:
    """The serve argv and environment with one ladder step applied."""
    new_env = {k: v for k, v in env.items() if k not in step.unset_env}
    new_env.update(step.env)
    return apply_args(argv, step.args), new_env


def _steps_data(steps: tuple[tuple[LadderStep, StepRun | None], ...]) -> Data:
    """Each step's table with the run it made (None: not run) and its verdict."""
    return to_data([{**to_table(s), "run": r.name if r else None,
                     "verdict": ("pass" if r.passed else "fail") if r else "not run"} for s, r in steps])


@record
class LadderResult:
    """A ladder run: each step with its run (None when not reached) and the first step that broke."""
    steps: tuple[tuple[LadderStep, StepRun | None], ...] = field(metadata=meta(dump=_steps_data))
    first_broken: str = field(metadata=meta(dump=empty_as_null))  # "" (written null): none broke
    how: str

    def to_dict(self) -> dict[str, Data]:
        """The report's table (report.json's `ladder`)."""
        return to_table(self)


def run_ladder(argv: Sequence[str], env: Mapping[str, str], steps: Sequence[LadderStep],
               run_one: Callable[[str, list[str], dict[str, str]], StepRun]) -> LadderResult:
    """Run each step on top of the previous ones; stop at the first that fails."""
    done: list[tuple[LadderStep, StepRun | None]] = []
    cur_argv, cur_env = list(argv), dict(env)
    for i, step in enumerate(steps):
        cur_argv, cur_env = apply(cur_argv, cur_env, step)
        result = run_one(step.name, cur_argv, cur_env)
        done.append((step, result))
        if not result.passed:
            done += [(s, None) for s in steps[i + 1:]]
            return LadderResult(tuple(done), step.name, f"{step.title}: {result.how()}")
    return LadderResult(tuple(done), "", "")
