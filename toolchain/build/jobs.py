"""How many compile jobs a build gets: min(cores, available memory / memory per job), at least 1.

Available memory is the target's MemAvailable, lowered by every cgroup limit above the build (v2
`memory.max` − use, v1 `memory.limit_in_bytes` − use; page cache that can be dropped is not counted as use),
so a container's `--memory` counts. Cores honour the CPU affinity and a cgroup CPU quota. A job count the
recipe (`[build] jobs`, `components.X.jobs`, or a job variable in its env) or the user's environment pins wins,
with a warning when it needs more memory than there is.

The readings come from `toolchain.build.intarget.gather()` run in the target; everything here is pure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from toolchain.core.record import field, record
from toolchain.core.serial import meta
from toolchain.errors import RecipeError
from toolchain.recipe.buildspec import JOB_ENV, GiB, MiB, parse_size
from toolchain.recipe.model import Component

# The variables the upstream builds read for their parallelism: vllm-xpu-kernels' setup.py (MAX_JOBS), CMake
# >= 3.12 (CMAKE_BUILD_PARALLEL_LEVEL, `cmake --build` without -j), ARK's setup.py (ARK_SYCL_TLA_JOBS).
JOB_VARIABLES = JOB_ENV
DEFAULT_PER_JOB = 2 * GiB
# Per-job memory of the upstream components, by distribution name (docs: UPSTREAM.md, "Build cost").
KNOWN_PER_JOB = {
    "vllm-xpu-kernels": (8 * GiB, "vllm-xpu-kernels tools/envs.py: about 8 GiB per compile job"),
    "auto-round-lib": (3 * GiB, "ARK setup.py: about 3 GiB per SYCL-TLA compile job"),
}
UNLIMITED = 1 << 60
def format_size(n: int) -> str:
    """A byte count, always in one shape: one decimal and a binary unit, the largest of GiB and MiB that it
    reaches once rounded, else KiB (`31.2 GiB`, `1.0 MiB`, `527.0 KiB`, `0.5 KiB`, `0.0 KiB`); never bare bytes,
    so a reading that happens to be small (a build's first memory sample) looks like any other."""
    for unit, size in (("GiB", GiB), ("MiB", MiB)):
        if round(n / size, 1) >= 1:
            return f"{n / size:.1f} {unit}"
    return f"{n / 1024:.1f} KiB"


@record
class Resources:
    """The cores and memory a target gives a build."""

    cpus: int
    memory: int          # bytes available to a build
    why_memory: str      # where `memory` comes from

    @classmethod
    def from_json(cls, text: str) -> Resources:
        """The resources the in-target script printed as JSON (its last line)."""
        raw = json.loads(text.strip().splitlines()[-1])
        return resources_from(raw["files"], int(raw["cpus"]))


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    if text == "max":
        return UNLIMITED
    try:
        return int(text)
    except ValueError:
        return None


def _stat(text: str | None, *keys: str) -> int:
    for line in (text or "").splitlines():
        k, _, v = line.partition(" ")
        if k in keys and v.strip().isdigit():
            return int(v)
    return 0


def resources_from(files: Mapping[str, str], cpus: int) -> Resources:
    """The memory and CPUs a target offers, read from its /proc and cgroup files (by path) and its CPU count."""
    meminfo = files.get("proc/meminfo", "")
    avail = None
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            avail = int(line.split()[1]) * 1024
    memory, why = (avail, "MemAvailable") if avail is not None else (UNLIMITED, "unknown")
    quota_cpus: float | None = None
    for path, text in files.items():
        if path.endswith("/memory.max") or path.endswith("/memory.limit_in_bytes"):
            limit = _int(text)
            if limit is None or limit >= UNLIMITED // 2:
                continue
            folder = path.rsplit("/", 1)[0]
            v2 = path.endswith("/memory.max")
            used = _int(files.get(f"{folder}/memory.current" if v2 else f"{folder}/memory.usage_in_bytes")) or 0
            cache = _stat(files.get(f"{folder}/memory.stat"), "inactive_file" if v2 else "total_inactive_file")
            free = max(0, limit - max(0, used - cache))
            if free < memory:
                memory = free
                why = f"cgroup limit {format_size(limit)} ({'memory.max' if v2 else 'memory.limit_in_bytes'}), " \
                      f"{format_size(max(0, used - cache))} in use"
        elif path.endswith("/cpu.max"):
            q, _, period = (text or "").strip().partition(" ")
            if q.isdigit() and period.strip().isdigit():
                quota_cpus = min(quota_cpus or math.inf, int(q) / int(period))
        elif path.endswith("/cpu.cfs_quota_us"):
            q2 = _int(text)
            period2 = _int(files.get(path.replace("cfs_quota_us", "cfs_period_us")))
            if q2 and q2 > 0 and period2:
                quota_cpus = min(quota_cpus or math.inf, q2 / period2)
    if quota_cpus is not None:
        cpus = max(1, min(cpus, math.ceil(quota_cpus)))
    return Resources(max(1, cpus), memory, why)


@record(kw_only=True)
class JobsDecision:
    """How many compile jobs a component gets, and why."""

    jobs: int
    per_job: int = field(metadata=meta(key="per-job-memory"))
    per_job_source: str
    source: str          # "memory" | "cores" | the pin ("recipe [build] jobs", "env MAX_JOBS", ...)
    why: str             # one line a person reads
    warning: str = field(default="", metadata=meta(omit_default=True))
    # job variables already set, which the tool leaves alone
    pinned: tuple[tuple[str, str], ...] = field(default=(), metadata=meta(skip=True))

    def env(self) -> dict[str, str]:
        """The job variables the tool sets (those not pinned)."""
        pinned = dict(self.pinned)
        # and the cores the build may use (build/intarget.py pins its affinity): what reaches a build that picks
        # its own job count from sched_getaffinity (ARK's CPU half)
        return {**{v: str(self.jobs) for v in JOB_VARIABLES if v not in pinned}, "TOOLCHAIN_BUILD_CPUS": str(self.jobs)}


def per_job_memory(comp: Component, recipe_default: int = 0) -> tuple[int, str]:
    """(bytes per compile job, where that comes from): the component's `memory-per-job`, the recipe's
    `[build] memory-per-job`, the known figure of an upstream component, or the tool's default."""
    if comp.memory_per_job:
        return comp.memory_per_job, f"components.{comp.name}.memory-per-job"
    if recipe_default:
        return recipe_default, "[build] memory-per-job"
    if (comp.dist or comp.name) in KNOWN_PER_JOB:
        return KNOWN_PER_JOB[comp.dist or comp.name]
    return DEFAULT_PER_JOB, "the tool's default"


def decide_jobs(res: Resources, per_job: int, per_job_source: str, *, recipe_pin: tuple[int, str] | None,
                recipe_env: Mapping[str, str | None], user_env: Mapping[str, str]) -> JobsDecision:
    """`recipe_pin`: (jobs, key) from `[build] jobs` / `components.X.jobs`; `recipe_env`: the component's
    build env from the recipe; `user_env`: the target's environment the build inherits."""
    by_memory = max(1, res.memory // per_job) if res.memory < UNLIMITED else res.cpus
    sized = max(1, min(res.cpus, by_memory))
    basis = (f"{format_size(res.memory)} available ({res.why_memory}) / {format_size(per_job)} per job "
             f"({per_job_source}) = {by_memory}; {res.cpus} cores")
    pinned = tuple((v, str(recipe_env[v])) for v in JOB_VARIABLES if recipe_env.get(v))
    source, jobs = "", 0
    if recipe_pin is not None:
        jobs, source = recipe_pin[0], f"recipe {recipe_pin[1]}"
    elif pinned:
        jobs, source = job_count(pinned[0][1], f"env {pinned[0][0]}"), f"recipe env {pinned[0][0]}"
    else:
        user = tuple((v, user_env[v]) for v in JOB_VARIABLES if user_env.get(v))
        if user:
            jobs, source = job_count(user[0][1], f"the environment's {user[0][0]}", user=True), f"environment {user[0][0]}"
            pinned = user
    if not source:
        which = "memory" if by_memory < res.cpus else "cores"
        return JobsDecision(jobs=sized, per_job=per_job, per_job_source=per_job_source, source=which,
                            why=f"{sized} jobs: {basis}")
    warning = ""
    if jobs * per_job > res.memory:
        warning = (f"{jobs} jobs pinned by the {source} need about {format_size(jobs * per_job)}, but only "
                   f"{format_size(res.memory)} is available ({res.why_memory}): the build may swap or be killed; "
                   f"{sized} would fit")
    return JobsDecision(jobs=jobs, per_job=per_job, per_job_source=per_job_source, source=source,
                        why=f"{jobs} jobs pinned by the {source} ({basis})",
                        warning=warning, pinned=pinned)


def job_count(text: str, where: str, user: bool = False) -> int:
    """A job count written at `where`: a positive integer, else a UsageError (a user's value) or RecipeError."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        from toolchain.errors import UsageError

        err = UsageError if user else RecipeError
        raise err(f"{where}: a job count must be a positive integer, got {text!r}",
                  hint="set it to 1 or more, or remove it and let the tool size the jobs by memory")
    return n


__all__ = [
    "JOB_VARIABLES",
    "JobsDecision",
    "Resources",
    "decide_jobs",
    "format_size",
    "job_count",
    "parse_size",
    "per_job_memory",
    "resources_from",
]
