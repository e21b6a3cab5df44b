"""`toolchain doctor`: the box as build and smoke will see it, one line per fact (ok / warn / missing) with
a fix. `TOOLCHAIN_HOST_ROOT=DIR` makes it read DIR as `/` (sysfs, /dev/dri, /proc, dpkg's status,
/opt/intel/oneapi): a fake host in tests, or a mounted image of the box a user reports from."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.commands import options
from toolchain.console import UI, CommandResult

if TYPE_CHECKING:
    from toolchain.build.plan import Plan
    from toolchain.recipe.model import Recipe, TargetSpec
    from toolchain.target.base import BuildRuntime
    from toolchain.target.doctor import Finding
    from toolchain.target.hostfacts import HostFacts

STATUS_STYLE = {"ok": "green", "warn": "yellow", "missing": "red"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("doctor", help="describe this box as build and smoke will see it, with fixes",
                       description="One line per fact, ok / warn / missing, each with a fix: the Intel GPUs "
                                   "(B60 = 0xe211 BMG-G21, B70 = 0xe223 BMG-G31), their driver, the render "
                                   "nodes and this user's access, the kernel, GuC/HuC firmware where readable, "
                                   "the Level Zero loader and compute runtime, oneAPI (from the recipe's setvars, "
                                   "else what is installed), oneCCL; in the target interpreter torch, its XPU "
                                   "build, torch.xpu.is_available() and the device count, and the stack's "
                                   "versions; memory and the compile jobs the plan gives; for a container recipe, last, its "
                                   "image (pulling nothing) and its engine (one trivial container with the "
                                   "recipe's run-args). Reads the box under $TOOLCHAIN_HOST_ROOT (default /). "
                                   "Exit 0 whatever it finds.")
    p.add_argument("--lock", type=Path, metavar="LOCK",
                   help="also say which libraries the lock expects of the run host (its host-provides) are present "
                        "here, and for each absent one which package brings it")
    options.add_recipe(p, help={"recipe": "recipe name or path: its target interpreter, setvars, [smoke] device and "
                                "compiled components (default: the host's python3, no recipe)"})
    p.set_defaults(handler=cmd_doctor)


def cmd_doctor(args: argparse.Namespace, ui: UI) -> CommandResult:
    from toolchain.recipe.load import TargetSpec
    from toolchain.target import make_runtime
    from toolchain.target.doctor import host_findings, interpreter_findings, oneapi_findings
    from toolchain.target.hostfacts import gather, host_root

    root = host_root()
    facts = gather(root)
    recipe = options.recipe_from_args(args, pinned=False) if args.recipe else None
    spec = recipe.target if recipe else TargetSpec()
    device, tp = (recipe.smoke.device, recipe.smoke.tensor_parallel_size) if recipe and recipe.smoke.model \
        else ("", 1)
    findings = host_findings(facts, root, device, tp)
    lib_lines = _host_libraries(args.lock, root) if args.lock is not None else []
    engine_lines, enter = _container_lines(spec, ui)
    if not enter:  # the target cannot be entered without a pull or a working engine: the host's facts alone
        findings += _host_only(facts)
        return _result(root, recipe, spec, facts, [*findings, *lib_lines, *engine_lines])
    with ui.status("reading the target interpreter"), make_runtime(spec, ui) as runtime:
        plan = None
        if recipe is not None:
            from toolchain.build.plan import make_plan

            plan = make_plan(recipe, runtime, need_toolchain=False)
            tc = plan.toolchain
            findings += oneapi_findings(facts, tc.oneapi_version, tc.setvars, plan.toolchain_missing,
                                        "TOOLCHAIN_ONEAPI_STANDIN" in dict(plan.toolchain_env.diff))
        else:
            findings += oneapi_findings(facts, "", "", "", False)
        findings += interpreter_findings(runtime, spec.python, facts, device)
        findings += _memory(facts)
        findings += _jobs(plan, runtime, spec.python)
    return _result(root, recipe, spec, facts, [*findings, *lib_lines, *engine_lines])


def _result(root: Path, recipe: Recipe | None, spec: TargetSpec, facts: HostFacts,
            findings: list[Finding]) -> CommandResult:
    from rich.markup import escape

    from toolchain.core.serial import to_table

    width = max(len(f.topic) for f in findings)
    lines = [f"[{STATUS_STYLE[f.status]}]{f.status:<7}[/] {escape(f.topic):<{width}}  {escape(f.value)}"
             + (f"  [dim]fix:[/] {escape(f.fix)}" if f.fix else "") for f in findings]
    counts = {s: sum(f.status == s for f in findings) for s in STATUS_STYLE}
    return CommandResult({"root": str(root), "recipe": recipe.name if recipe else None,
                          "host": to_table(facts, kebab=True), "findings": [to_table(f) for f in findings], "counts": counts},
                         0, "\n".join([f"doctor: {root} ({recipe.name if recipe else 'no recipe'}, {spec.python} "
                                        f"on {spec.runtime})", *lines,
                                        ", ".join(f"{n} {s}" for s, n in counts.items())]))


def _host_libraries(lock_path: Path, root: Path) -> list[Finding]:
    """The host-libraries section: the lock's host-provides looked up under `root`."""
    from toolchain.lock import read_lock
    from toolchain.resolve.hostlibs import host_library_findings
    from toolchain.resolve.policy import policy_of_recipe_text

    lock = read_lock(lock_path)
    return host_library_findings(lock.native, root, policy_of_recipe_text(lock.recipe_text), lock.recipe_name)


def _container_lines(spec: TargetSpec, ui: UI) -> tuple[list[Finding], bool]:
    """doctor's last lines for a container target (the image, then the engine: one trivial container with the
    recipe's run-args) and whether the target can be entered: nothing is pulled. The host: none, and yes."""
    from toolchain.target import in_container

    if not in_container(spec):
        return [], True
    from toolchain.target.container.presence import container_findings

    with ui.status(f"trying {spec.runtime} with the recipe's run-args"):
        return container_findings(spec, ui)


def _host_only(facts: HostFacts) -> list[Finding]:
    """What doctor reads of the host when the target cannot be entered: oneAPI as installed, the memory."""
    from toolchain.target.doctor import oneapi_findings

    return [*oneapi_findings(facts, "", "", "", False), *_memory(facts)]


def _memory(facts: HostFacts) -> list[Finding]:
    from toolchain.build.jobs import format_size
    from toolchain.target.doctor import Finding

    return [Finding("memory", "ok", f"{format_size(facts.memory_total)} total, "
                                    f"{format_size(facts.memory_available)} available")] if facts.memory_total else []


def _jobs(plan: Plan | None, runtime: BuildRuntime, python: str) -> list[Finding]:
    """The compile jobs each compiled component gets here (the plan's decision), or, without a recipe, what
    a vllm-xpu-kernels build (8 GiB a job) would get."""
    from toolchain.build.jobs import KNOWN_PER_JOB, decide_jobs
    from toolchain.build.plan import probe_resources
    from toolchain.target.doctor import Finding

    if plan is not None:
        return [Finding(f"jobs: {c.name}", "warn" if c.jobs.warning else "ok", c.jobs.why, c.jobs.warning)
                for c in plan.components if c.jobs is not None]
    per_job, why = KNOWN_PER_JOB["vllm-xpu-kernels"]
    d = decide_jobs(probe_resources(runtime, python), per_job, why, recipe_pin=None, recipe_env={},
                    user_env=runtime.base_env())
    return [Finding("jobs: vllm-xpu-kernels", "warn" if d.warning else "ok", d.why, d.warning)]
