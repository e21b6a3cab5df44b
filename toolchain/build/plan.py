"""Recipe → Plan: every component with its commit, patches (sha256), build env, exact command and cache key.

Making a plan probes the target and sources the toolchain there, but fetches and builds nothing. `toolchain
plan` also reads what the local mirrors say of each pinned commit (`source_facts`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from toolchain import __version__
from toolchain.build.jobs import JobsDecision, Resources, decide_jobs, per_job_memory
from toolchain.build.prebuilt_wheels import PrebuiltFile, prebuilt_key
from toolchain.core.fs import sha256_bytes, sha256_file
from toolchain.core.probe_memo import remembered, stat_key
from toolchain.core.proc.runner import merge_env
from toolchain.core.record import record
from toolchain.core.redact import is_secret, redact_argv, redact_env, redact_text
from toolchain.core.serial import Data, from_data, to_table
from toolchain.errors import RecipeError, ToolError
from toolchain.recipe.model import Component, InputFile, Patch, Recipe
from toolchain.sources.mirrors import Mirrors
from toolchain.sources.patches import applied_at
from toolchain.target.facts import TargetInfo, ToolchainInfo, probe_dists, probe_inputs, sys_path_env
from toolchain.target.oneapi import IGNORED, ToolchainEnv, capture

if TYPE_CHECKING:
    from toolchain.target.base import BuildRuntime

KEY_VERSION = "3"  # bump when the build procedure changes in a way that changes wheels (2: describe abbrev 12;
#                    3: no RUNPATH into the build interpreter's prefix, build/intarget.py `link_env`)


@record
class ComponentPlan:
    """One component's part of a plan: environment, cache key and jobs, decided once."""

    component: Component
    env: tuple[tuple[str, str | None], ...]  # recipe env + component env + version override (no toolchain)
    cache_key: str  # "" when the toolchain could not be captured (`Plan.toolchain_missing`)
    jobs: JobsDecision | None = None  # compile jobs (not in the cache key: they do not change the wheel)
    prebuilt: PrebuiltFile | None = None  # the pinned released wheel taken instead of a build
    inputs: tuple[InputFile, ...] = ()  # files read beyond the tree, with sha256 (in the cache key)

    @property
    def is_prebuilt(self) -> bool:
        """Whether the component is taken as a released wheel instead of being compiled."""
        return self.component.prebuilt is not None or self.prebuilt is not None

    @property
    def name(self) -> str:
        """The component's name in the recipe."""
        return self.component.name

    @property
    def patches(self) -> tuple[Patch, ...]:
        """The patches applied to the component's source tree."""
        return self.component.patches

    def display_env(self) -> dict[str, str | None]:
        """The component's build environment with secret values redacted, for showing."""
        return redact_env(dict(self.env))


@record
class Plan:
    """A recipe made concrete for one target: the probed target, the toolchain and each component's plan."""

    recipe: Recipe
    target: TargetInfo
    toolchain: ToolchainInfo
    toolchain_env: ToolchainEnv
    components: tuple[ComponentPlan, ...]
    toolchain_missing: str = ""  # why the toolchain was not captured (only a plan to show has this)
    resources: Resources | None = None  # the target's cores and available memory, when probed

    def component(self, name: str) -> ComponentPlan:
        """The plan of the component `name`."""
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)


def component_env(recipe: Recipe, comp: Component) -> dict[str, str | None]:
    """The environment one component builds with: the recipe's env, the component's own, and its pretend version."""
    env: dict[str, str | None] = dict(recipe.env)
    env.update(comp.env)
    if comp.version:
        env[comp.version_env] = comp.version
    return env


def cache_key(comp: Component, patches: tuple[Patch, ...], env: dict[str, str | None], target: TargetInfo,
              toolchain: ToolchainInfo, inputs: tuple[InputFile, ...] | None = None,
              against: tuple[tuple[str, str], ...] = ()) -> str:
    """Covers what changes the wheel: source (commit, subdir, patches, pre-fetched deps), command, build env
    and the toolchain fingerprint. Not the URL (a mirror serves the same commits) nor secret values."""
    material = {
        "key-version": KEY_VERSION,
        "commit": comp.commit, "subdir": comp.subdir,
        "patches": [p.sha256 for p in patches],
        "fetchcontent": [(f.name.upper(), f.commit, f.env) for f in comp.fetchcontent],
        "command": list(comp.command),
        "env": sorted((k, "<secret>" if is_secret(k) else v) for k, v in env.items()),
        "target": target.fingerprint(),
        "toolchain": [toolchain.oneapi_version, toolchain.cmplr_root, toolchain.env_diff_sha256],
    }
    if comp.built_against:  # (only then: the keys of every other component stay as they were)
        versions = dict(against)  # the versions its build environment has (`built_against_versions`)
        material["built-against"] = [[n, versions[n]] if n in versions else n for n in comp.built_against]
    inputs = component_inputs(comp, env) if inputs is None else inputs
    if inputs:  # (the same: only a component with input files gets a new key)
        material["inputs"] = [(i.label, i.sha256) for i in inputs]
    return sha256_bytes(json.dumps(material, sort_keys=True).encode())[:32]


def component_inputs(comp: Component, env: Mapping[str, str | None]) -> tuple[InputFile, ...]:
    """The files a build reads beyond its source tree: the component's declared `inputs`, then every env
    value that names an existing file by absolute path (a kernel configuration preset such as
    VLLM_CHUNK_PREFILL_CONFIG=/home/me/prefill.py), each with its sha256: editing one changes the key."""
    found = list(comp.inputs)
    for name, value in sorted(env.items()):
        if value and value.startswith(("/", "~")) and "\n" not in value and not is_secret(name):
            path = Path(value).expanduser()
            if path.is_file():
                found.append(InputFile(f"env {name}", sha256_file(path), path))
    return tuple(found)


def make_plan(recipe: Recipe, runtime: BuildRuntime, *, log_dir: Path | None = None, memo_dir: Path | None = None,
              need_toolchain: bool = True) -> Plan:
    """`need_toolchain=False` (a plan to show, not to build): a toolchain that cannot be captured is
    recorded in `toolchain_missing` and the cache keys, which depend on it, are left empty."""
    recipe.remember_text(memo_dir)
    ident = runtime.identity()
    target = probe_target(runtime, memo_dir, ident)
    missing = ""
    try:
        tenv = capture_toolchain(recipe, runtime, memo_dir, ident,
                                 log=(log_dir / "setvars.log") if log_dir else None)
    except ToolError as err:
        if need_toolchain:
            raise
        missing = str(err).splitlines()[0]
        spec = recipe.toolchain
        tenv = ToolchainEnv(ToolchainInfo(setvars=runtime.toolchain_path(spec.setvars, spec.base_dir),
                                          setvars_args=spec.setvars_args), ())
    resources = probe_resources(runtime, recipe.target.python)
    user_env = runtime.base_env()
    comps = []
    for comp in recipe.components:
        if comp.prebuilt is not None:
            comps.append(prebuilt_plan(comp))
            continue
        env = component_env(recipe, comp)
        inputs = component_inputs(comp, env)
        against = () if missing else built_against_versions(
            runtime, recipe.target.python, comp.built_against, {**tenv.as_dict(), **env}, memo_dir, ident)
        key = "" if missing else cache_key(comp, comp.patches, env, target, tenv.info, inputs, against)
        comps.append(ComponentPlan(comp, tuple(env.items()), key,
                                   component_jobs(recipe, comp, env, resources, user_env), inputs=inputs))
    return Plan(recipe, target, tenv.info, tenv, tuple(comps), missing, resources=resources)


def unprobed_plan(recipe: Recipe, why: str) -> Plan:
    """A plan to show where the target cannot be entered without pulling its image (`plan` pulls nothing): the
    target as the recipe names it, the toolchain "not captured: `why`", no cache keys (they depend on both)
    and no compile jobs (they depend on the target's memory)."""
    spec = recipe.target
    info = ToolchainInfo(setvars=recipe.toolchain.setvars, setvars_args=recipe.toolchain.setvars_args)
    comps = []
    for comp in recipe.components:
        env = component_env(recipe, comp)
        comps.append(prebuilt_plan(comp) if comp.prebuilt is not None else
                     ComponentPlan(comp, tuple(env.items()), "", inputs=component_inputs(comp, env)))
    return Plan(recipe, TargetInfo(runtime=spec.runtime, python=spec.python, image=spec.image), info,
                ToolchainEnv(info, ()), tuple(comps), why)


def prebuilt_plan(comp: Component, pinned: PrebuiltFile | None = None) -> ComponentPlan:
    """A prebuilt component's plan: no env, no jobs; its cache key is its file's sha256 once pinned (the
    recipe's {url, sha256} is; a "dist==version" is pinned from the [resolve] indexes before the build)."""
    pre = comp.prebuilt
    if pinned is None and pre is not None and pre.url and pre.sha256:
        from urllib.parse import unquote, urlparse

        pinned = PrebuiltFile(unquote(urlparse(pre.url).path).rsplit("/", 1)[-1], pre.url, pre.sha256)
    return ComponentPlan(comp, (), prebuilt_key(pinned.sha256) if pinned else "", None, pinned)


def probe_resources(runtime: BuildRuntime, python: str) -> Resources:
    """Cores and available memory as the target sees them (a container's limits included): the in-target
    script's `resources` query, which the host answers in this process (`Place.query`: a child inherits its
    cgroup and CPU affinity) instead of starting an interpreter for every plan."""
    from toolchain.build.metrics import RUNNER_FILE

    r = runtime.query(python, RUNNER_FILE, "resources")
    try:
        return Resources.from_json(r.stdout)
    except (ValueError, KeyError, IndexError):
        import os

        return Resources(os.cpu_count() or 1, 1 << 60, f"unknown (the probe failed: {(r.stderr or r.stdout)[-200:]})")


def component_jobs(recipe: Recipe, comp: Component, env: dict[str, str | None], res: Resources,
                   user_env: dict[str, str]) -> JobsDecision:
    """How many compile jobs one component gets: pinned by the recipe or user, or sized by memory per job."""
    per_job, why = per_job_memory(comp, recipe.build.memory_per_job)
    pin = ((comp.jobs, f"components.{comp.name}.jobs") if comp.jobs
           else (recipe.build.jobs, "[build] jobs") if recipe.build.jobs else None)
    return decide_jobs(res, per_job, why, recipe_pin=pin, recipe_env=env, user_env=user_env)


def probe_target(runtime: BuildRuntime, memo_dir: Path | None, ident: dict[str, object] | None) -> TargetInfo:
    """What the target offers (python, platform, ...), taken from the memo while its identity (the interpreter,
    the variables that shape its sys.path) is unchanged and every input the probe reported is as it was."""
    if ident is None:
        return runtime.probe()

    def compute() -> tuple[dict[str, Data], dict[str, list[int] | None]]:
        before = {p: stat_key(p) for p in _interpreter_files(ident)}
        info, inputs = runtime.probe_inputs()
        return to_table(info), {**before, **inputs}

    identity = {**ident, "sys-path-env": sys_path_env(runtime.base_env())}
    return from_data(TargetInfo, remembered(memo_dir, "probe", identity, compute))


def built_against_versions(runtime: BuildRuntime, python: str, names: tuple[str, ...], env: Mapping[str, str | None],
                           memo_dir: Path | None, ident: dict[str, object] | None) -> tuple[tuple[str, str], ...]:
    """The version of each of `names` the component's build environment (`env` over the target's: setvars'
    PYTHONPATH and the component's env included) has installed ("" for none): in the cache key, so a wheel
    built against another torch is never served."""
    found = installed_versions(runtime, python, names, env, memo_dir, ident)
    return tuple((n, found.get(n) or "") for n in names)


def installed_versions(runtime: BuildRuntime, python: str, names: Sequence[str], env: Mapping[str, str | None],
                       memo_dir: Path | None, ident: dict[str, object] | None) -> dict[str, str | None]:
    """{name: version, None where not installed} as `python` finds them with `env` over the target's
    environment (toolchain/scripts/interpreter.py NAME...). Remembered while that environment is the same and
    every path the probe read (sys.path, .pth files, each distribution's metadata) is unchanged."""
    if not names:
        return {}
    merged = merge_env(runtime.base_env(), env)
    full = sorted((k, v) for k, v in merged.items() if k not in IGNORED)
    identity = None if ident is None else {"target": ident, "names": list(names),
                                           "env": sha256_bytes(json.dumps(full).encode()),
                                           "sys-path-env": sys_path_env(merged)}  # (a relative PYTHONPATH resolved)

    def compute() -> tuple[dict[str, str | None], dict[str, list[int] | None]]:
        before = {p: stat_key(p) for p in (_interpreter_files(ident) if ident else [])}
        r = runtime.run([python, "-S", runtime.script("interpreter.py"), *names], env=env, capture=True, check=False)
        if r.returncode != 0:
            raise RecipeError(f"target.python: {python!r} does not run in the build environment "
                              f"(exit {r.returncode}): {(r.stderr or r.stdout).strip()[-500:]}",
                              hint="check the PYTHON* variables setvars and the recipe's env set")
        return probe_dists(r.stdout), {**before, **probe_inputs(r.stdout)}

    return remembered(memo_dir, "installed", identity, compute)


def _interpreter_files(ident: dict[str, object]) -> list[str]:
    """The files that choose the interpreter a probe ran: the interpreter, and what picks the one a wrapper (a
    pyenv shim) runs (its identity's `watch`)."""
    wrapper = ident.get("watch")
    return [str(ident["python"]), *([str(p) for p in wrapper] if isinstance(wrapper, list) else [])]


# What `capture_toolchain` remembers of a sourced setvars (JSON): ToolchainInfo's fields, [name, value or None
# (unset)] of each variable it changed, its banner, every file it sourced. (The functional form, with the
# types themselves: a class form's annotations are strings here, and TypedDict compiles each one.)
_SavedSetvars = TypedDict("_SavedSetvars", {  # noqa: UP013
    "info": dict[str, Data], "diff": list[list[str | None]], "banner": str, "sourced": list[str]})


def capture_toolchain(recipe: Recipe, runtime: BuildRuntime, memo_dir: Path | None, ident: dict[str, object] | None,
                      log: Path | None = None) -> ToolchainEnv:
    """The oneAPI environment setvars gives in the target, taken from the memo while its identity is unchanged."""
    if not recipe.toolchain.enabled:
        return capture(recipe, runtime, log=log)
    setvars = runtime.toolchain_path(recipe.toolchain.setvars, recipe.toolchain.base_dir)
    base = sorted((k, v) for k, v in runtime.base_env().items() if k not in IGNORED)
    identity = None if ident is None else {"target": ident, "setvars": setvars,
                                           "args": list(recipe.toolchain.setvars_args),
                                           "env": sha256_bytes(json.dumps(base).encode())}

    def compute() -> tuple[_SavedSetvars, list[str] | None]:
        t = capture(recipe, runtime, log=log)
        # its inputs: setvars, every file it sourced (reported by the wrapped `source` and `.`), its folder and
        # each folder in it (real setvars globs them: <component>/latest/env/vars.sh) and the compiler whose
        # banner is the version (a file rewritten in place leaves its folder's stat as it was)
        root = Path(setvars).parent
        inputs: list[str] | None = [setvars, *t.sourced, *t.read, str(root)]
        if root.is_dir() and inputs is not None:
            inputs += [str(p) for p in root.iterdir()]
        if t.info.cmplr_root and inputs is not None:
            inputs += [t.info.cmplr_root, f"{t.info.cmplr_root}/bin", f"{t.info.cmplr_root}/bin/icpx"]
        if any(is_secret(k) for k, _ in t.diff):
            inputs = None  # setvars exported a secret: never write it to the cache
        return {"info": to_table(t.info), "diff": [list(kv) for kv in t.diff], "banner": t.banner,
                "sourced": list(t.sourced)}, inputs

    saved = remembered(memo_dir, "setvars", identity, compute, racy=True)  # (a shell: no stat before it reads)
    return ToolchainEnv(from_data(ToolchainInfo, saved["info"]), tuple((str(k), v) for k, v in saved["diff"]),
                        saved["banner"], tuple(saved.get("sourced", ())))


@record
class SourceFacts:
    """What the local mirror says of a pinned commit; `missing` says why it cannot say."""
    describe: str = ""
    date: str = ""   # committer date, ISO 8601
    epoch: str = ""  # committer date, seconds: the build's SOURCE_DATE_EPOCH
    missing: str = ""


def source_facts(recipe: Recipe, mirrors: Mirrors, fetching: Callable[[], Mirrors]) -> dict[str, SourceFacts]:
    """Each component's pinned commit as its local mirror has it. No mirror is cloned here: a component whose
    mirror does not exist yet is reported missing. A mirror that exists but lacks the commit is fetched once
    (through `fetching()`, with the recipe's URL rewrites): a commit still absent then is a SourceError (exit 2);
    without that fetch a typo could not be told from a mirror fetched before the commit existed."""
    out = {}
    for comp in recipe.components:
        if comp.prebuilt is not None:
            out[comp.name] = SourceFacts(missing=f"prebuilt ({comp.prebuilt.label}): no source, never compiled")
            continue
        if not (mirrors.path(comp.url) / "HEAD").exists():
            out[comp.name] = SourceFacts(missing=f"not fetched yet: no mirror of {comp.url} in "
                                                 f"{mirrors.root} (`toolchain build` fetches it)")
            continue
        if not mirrors.has_commit(comp.url, comp.commit):
            fetching().ensure(comp.url, comp.commit, where=f"{recipe.path.name}: components.{comp.name}.commit")
        info = mirrors.commit_info(comp.url, comp.commit)
        out[comp.name] = SourceFacts(mirrors.describe(comp.url, comp.commit), info["date"], info["epoch"])
    return out


def plan_to_dict(plan: Plan) -> dict[str, Any]:  # the JSON document; `toolchain plan` reads and extends it
    """The plan as the JSON document `toolchain plan --json` prints, secrets redacted."""
    toolchain: dict[str, object] = {"setvars": plan.toolchain.setvars, "setvars-args": list(plan.toolchain.setvars_args),
                 "oneapi-version": plan.toolchain.oneapi_version, "cmplr-root": plan.toolchain.cmplr_root,
                 "env": redact_env(plan.toolchain_env.as_dict())}
    if plan.toolchain_missing:
        toolchain["status"] = f"not captured: {plan.toolchain_missing}"
    return {
        "recipe": {"name": plan.recipe.name, "path": str(plan.recipe.path), "sha256": plan.recipe.sha256,
                   "found": [to_table(f) for f in plan.recipe.found],
                   "swapped": [to_table(s, kebab=True) for s in plan.recipe.swaps]},
        "target": plan.target.fingerprint(),
        "toolchain": toolchain,
        "tool-version": __version__,
        "components": [prebuilt_to_dict(c) if c.is_prebuilt else {
            "name": c.name, "url": redact_text(c.component.url), "ref": c.component.ref, "commit": c.component.commit,
            "subdir": c.component.subdir, "after": list(c.component.after),
            "patches": [{"path": redact_text(p.label), "sha256": p.sha256,
                         **({"applied-at": at} if (at := applied_at(p, c.component.subdir)) else {})}
                        for p in c.patches],
            "fetchcontent": [{"name": f.name, "url": redact_text(f.url), "commit": f.commit}
                             for f in c.component.fetchcontent],
            "env": c.display_env(), "command": redact_argv(c.component.command), "cache-key": c.cache_key,
            **({"jobs": to_table(c.jobs, kebab=True)} if c.jobs else {}),
        } for c in plan.components],
        **({"resources": {"cpus": plan.resources.cpus, "memory-bytes": plan.resources.memory,
                          "memory-source": plan.resources.why_memory}} if plan.resources else {}),
    }


def prebuilt_to_dict(cp: ComponentPlan) -> dict[str, Any]:
    """A prebuilt component as `toolchain plan` shows it: what the recipe says and, once pinned, the file."""
    pre = cp.component.prebuilt
    shown: dict[str, object] = {"requirement": pre.requirement} if pre and pre.requirement else {}
    if cp.prebuilt is not None:
        shown.update(to_table(cp.prebuilt), file=cp.prebuilt.file)
    elif pre is not None:
        shown["status"] = "pinned when built: the file and its sha256 from the [resolve] indexes and find-links"
    return {"name": cp.name, "prebuilt": shown, "after": list(cp.component.after), "dist": cp.component.dist,
            "cache-key": cp.cache_key}
