"""`toolchain doctor` as one library call: the box as build and smoke will see it (toolchain.target.doctor's
findings on the host's facts, oneAPI as the recipe's plan sources it, the target interpreter), the memory and
the compile jobs the plan gives, a lock's host libraries, and for a container target its image and engine.
`TOOLCHAIN_HOST_ROOT=DIR` makes it read DIR as `/`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.console import UI
from toolchain.core.record import record

if TYPE_CHECKING:
    from toolchain.build.plan import Plan
    from toolchain.recipe.model import Recipe, TargetSpec
    from toolchain.target.base import BuildRuntime
    from toolchain.target.doctor import Finding
    from toolchain.target.hostfacts import HostFacts


@record
class Checkup:
    """What doctor found: the root it read as `/`, the recipe and target it read for, the host's facts and
    one finding a line (the host, oneAPI, the interpreter, memory, jobs, then the lock's libraries, then the
    container's image and engine)."""

    root: Path
    recipe: Recipe | None
    spec: TargetSpec
    facts: HostFacts
    findings: tuple[Finding, ...]


def check_box(recipe: Recipe | None, lock_path: Path | None, ui: UI) -> Checkup:
    """The box as build and smoke will see it for `recipe` (None: the host's python3, no recipe), with the
    host libraries `lock_path`'s lock expects of the run host when given. Pulls nothing; raises only for a
    lock that cannot be read."""
    from toolchain.recipe.load import TargetSpec
    from toolchain.target import entry_findings, make_runtime
    from toolchain.target.doctor import host_findings, interpreter_findings, oneapi_findings
    from toolchain.target.hostfacts import gather, host_root

    root = host_root()
    facts = gather(root)
    spec = recipe.target if recipe else TargetSpec()
    device, tp = (recipe.smoke.device, recipe.smoke.tensor_parallel_size) if recipe and recipe.smoke.model \
        else ("", 1)
    findings = host_findings(facts, root, device, tp)
    lib_lines = _host_libraries(lock_path, root) if lock_path is not None else []
    engine_lines, enter = entry_findings(spec, ui)
    if not enter:  # the target cannot be entered without a pull or a working engine: the host's facts alone
        findings += _host_only(facts)
        return Checkup(root, recipe, spec, facts, (*findings, *lib_lines, *engine_lines))
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
    return Checkup(root, recipe, spec, facts, (*findings, *lib_lines, *engine_lines))


def _host_libraries(lock_path: Path, root: Path) -> list[Finding]:
    """The host-libraries section: the lock's host-provides looked up under `root`."""
    from toolchain.lock import read_lock
    from toolchain.resolve.hostlibs import host_library_findings
    from toolchain.resolve.policy import policy_of_recipe_text

    lock = read_lock(lock_path)
    return host_library_findings(lock.native, root, policy_of_recipe_text(lock.recipe_text), lock.recipe_name)


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
