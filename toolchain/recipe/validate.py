"""A recipe table → a validated, frozen `Recipe` (recipe.model).

Validation collects every problem at once, each naming the file, the key and what to do (with a "did you
mean" for a mistyped name), and raises one `RecipeError` (exit 2). Relative paths resolve against the recipe
file that declared them (`Origin`): a local patch must lie inside that recipe's patches/ directory; a patch
from anywhere else is a pinned `{url, commit, path, sha256}` table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from toolchain.core.devices import PROFILES
from toolchain.core.names import did_you_mean
from toolchain.core.redact import redact_url
from toolchain.core.regex import ASCII_LETTERS, DIGITS, HEX40, SHA256, SHA256_HEX, URL_CREDENTIALS, Chars, Regex
from toolchain.errors import RecipeError
from toolchain.recipe import buildspec
from toolchain.recipe.cachespec import CACHE_KEYS, cache_spec
from toolchain.recipe.keys import keys_of
from toolchain.recipe.model import (
    DEFAULT_COMMAND,
    DEFAULT_INDEX,
    DEFAULT_INSTALL_ARGS,
    DEFAULT_SETVARS,
    DEFAULT_VERSION_ENV,
    INDEX_STRATEGIES,
    PREBUILT_KEYS,
    Component,
    NativeSpec,
    Origin,
    Prebuilt,
    Recipe,
    Recorded,
    ResolveSpec,
    SmokeSpec,
    SuiteSpec,
    TargetSpec,
    ToolchainSpec,
)
from toolchain.recipe.problems import ENV_NAME, _Problems, _str
from toolchain.recipe.validate_fetch import _fetchcontent, _unpinned
from toolchain.recipe.validate_files import _inputs, _Kept, _patches

PLACEHOLDERS = ("python", "src", "out")
RUNTIMES = ("host", "podman", "docker")
LOWER = "abcdefghijklmnopqrstuvwxyz"
NAME = Chars(LOWER + DIGITS + "._-", first=LOWER + DIGITS)  # ^[a-z0-9][a-z0-9._-]*\Z

# each table's keys, from the model fields they fill (recipe/keys.py), and the keys that fill no field
TOP_KEYS = keys_of(Recipe, extends=str)
NATIVE_KEYS = keys_of(NativeSpec)
SONAME_PATTERN = Regex(r"^[A-Za-z0-9_.+*?\[\]-]+$")
RESOLVE_KEYS = keys_of(ResolveSpec)
TOOLCHAIN_KEYS = keys_of(ToolchainSpec)
TARGET_KEYS = keys_of(TargetSpec)
PINNED_IMAGE = Regex(rf"^[^\s@]+@sha256:{SHA256}$")
COMPONENT_KEYS = keys_of(Component, extend_patches=list, drop=bool)
SMOKE_KEYS = keys_of(SmokeSpec)
SUITE_KEYS = keys_of(SuiteSpec)
MAX_RERUNS = 3  # [smoke.suite] reruns: more hides a test that fails more often than it passes


class MissingFiles(RecipeError):
    """A recipe read back from a lock names local files (patches, inputs) that are neither where the lock
    records them nor kept in the cache: the recipe text is fine, the files have to be supplied."""

    heading = "a locked file is missing"

    def __init__(self, problems: list[str] | str, *, hint: str | None = None) -> None:
        listed = [problems] if isinstance(problems, str) else list(problems)
        super().__init__(listed if len(listed) > 1 else [f"{self.heading}: {listed[0]}"], hint=hint)
        self.problems = listed


def validated(data: dict[str, Any], *, name: str, path: Path, patches_dir: Path | Sequence[Path],
              pinned: bool = True, origins: Mapping[str, Origin] | Iterable[tuple[str, Origin]] = (),
              recorded: Recorded | None = None) -> Recipe:
    """Validate a resolved recipe table. `patches_dir`: where this recipe's own patches are (a lock's recorded
    recipe may name several, searched in order); `origins`: keys declared by another recipe file (see
    `Recipe.origins`), whose relative paths resolve against that file; `recorded`: a lock's record of the
    files (a file found nowhere is taken from the cache by its hash, else MissingFiles names it)."""
    dirs = (patches_dir,) if isinstance(patches_dir, Path) else tuple(patches_dir)
    own = Origin(path, dirs)
    declared = dict(origins)
    pr = _Problems(path)
    for key in _null_bytes(data, ""):
        pr.add(key, "holds a NUL byte (\\u0000), which no file name, URL, argument or environment value can carry; "
                    "remove it")
    if pr.items:  # nothing else is checked: a NUL would reach the file system or git on the way
        raise RecipeError(pr.items, hint=f"fix {path} (each line names the key)")
    pr.check_keys(data, TOP_KEYS, "")
    tc = data.get("toolchain", {}) if isinstance(data.get("toolchain"), dict) else {}
    pr.check_keys(tc, TOOLCHAIN_KEYS, "toolchain.")
    setvars = tc.get("setvars", DEFAULT_SETVARS)
    toolchain = ToolchainSpec(setvars=setvars if isinstance(setvars, str) else "",
                              setvars_args=pr.str_list(tc, "setvars-args", "toolchain.setvars-args")
                              if "setvars-args" in tc else ToolchainSpec.setvars_args,
                              base_dir=declared.get("toolchain.setvars", own).dir)
    target = _target(data.get("target", {}), pr)
    env = pr.env_table(data.get("env", {}), "env")
    buildspec.check_job_env(dict(env), "env", pr.add)
    if isinstance(data.get("build"), dict):
        pr.check_keys(data["build"], buildspec.BUILD_KEYS, "build.")
    build = buildspec.build_spec(data.get("build", {}), pr.add)
    mirrors = _mirrors(data.get("mirrors", {}), pr)
    components = _components(data.get("components"), pr, own, declared, pinned, recorded)
    smoke = _smoke(data.get("smoke", {}), pr)
    if isinstance(data.get("cache"), dict):
        pr.check_keys(data["cache"], CACHE_KEYS, "cache.")
    cache = cache_spec(data.get("cache"), pr.add)
    resolve = _resolve(data.get("resolve", {}), pr, path)
    native = _native(data.get("native", {}), pr)
    image_base = _image_base(data.get("image", {}), pr)
    if target.base:  # rebuilt over the image: installed with --force-reinstall --no-deps, as the direct fix does
        for c in components:
            if not {"--no-deps", "--force-reinstall"} <= set(c.install_args):
                pr.add(f"components.{c.name}.install-args", "a component rebuilt over [target] base is installed "
                                                            "over the image with --force-reinstall --no-deps; "
                                                            "remove install-args (or include both)")
    if pr.items and pr.missing == len(pr.items):
        raise MissingFiles(pr.items, hint="supply them: rebuild from the lock's bundle, from any folder (`toolchain "
                                          "build --from-lock BUNDLE/stack.lock.toml`: its patches/ and inputs/ are "
                                          "searched), or pass --patches-dir DIR holding them (patches and inputs "
                                          "alike); a file is also taken by its sha256 from your cache (--cache-dir), "
                                          "where every build keeps the files it read")
    if pr.items:
        raise RecipeError(pr.items, hint=f"fix {path} (each line names the key); the format: the README's Recipes section "
                                     "(the package's description), and the shipped recipes as examples "
                                     "(`toolchain recipes` says where each is)")
    kept = tuple((k, o) for k, o in declared.items() if o != own)
    return Recipe(name=name, path=path, description=str(data.get("description", "")), toolchain=toolchain,
                  target=target, env=env, mirrors=mirrors, components=components, smoke=smoke,
                  demo=bool(data.get("demo", False)), patches_dirs=dirs, data=data, origins=kept, cache=cache,
                  resolve=resolve, build=build, native=native, image_base=image_base)


def _placeholders(arg: str) -> list[str]:
    r"""What `re.findall(r"\{([^}]*)\}", arg)` finds: the text inside each `{...}` of a command's argument."""
    found, start = [], arg.find("{")
    while start >= 0:
        end = arg.find("}", start + 1)
        if end < 0:
            break
        found.append(arg[start + 1:end])
        start = arg.find("{", end + 1)
    return found


def _null_bytes(value: Any, where: str) -> Iterator[str]:
    """The keys (dotted, [i] for array items) whose name or string value holds a NUL byte."""
    if isinstance(value, str):
        if "\x00" in value:
            yield where or "(top level)"
    elif isinstance(value, dict):
        for k, v in value.items():
            key = f"{where}.{k}" if where else str(k)
            if "\x00" in str(k):
                yield key.replace("\x00", "\\u0000")
            else:
                yield from _null_bytes(v, key)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _null_bytes(v, f"{where}[{i}]")


def _image_base(table: Any, pr: _Problems) -> str:
    """`[image] base`: the image `toolchain image` puts a lock over when its target has no base (pinned)."""
    if not isinstance(table, dict):
        return ""
    pr.check_keys(table, {"base": str}, "image.")
    base = table.get("base", "")
    if isinstance(base, str) and base and not PINNED_IMAGE.match(base):
        pr.add("image.base", f"must be pinned by digest (name@sha256:<64 hex>), got {base!r}; "
                             "`podman image inspect --format '{{.Digest}}' NAME` shows it")
        return ""
    return base if isinstance(base, str) else ""


def _target(t: Any, pr: _Problems) -> TargetSpec:
    if not isinstance(t, dict):
        return TargetSpec()
    pr.check_keys(t, TARGET_KEYS, "target.")
    runtime = t.get("runtime", "host")
    if isinstance(runtime, str) and runtime not in RUNTIMES:
        pr.add("target.runtime", f"unknown runtime {runtime!r}{did_you_mean(runtime, list(RUNTIMES))}; "
                                 f"use one of {', '.join(RUNTIMES)}")
    image, container = t.get("image", ""), t.get("container", "")
    base = t.get("base", "")
    if isinstance(base, str) and base:
        if runtime not in ("podman", "docker"):
            pr.add("target.base", "a base image is used through a container: set runtime = \"podman\" or \"docker\"")
        if image or container:
            pr.add("target.base", "`base` is the image the components are rebuilt in and installed over; "
                                  "remove `image` / `container`")
        if not PINNED_IMAGE.match(base):
            pr.add("target.base", f"must be pinned by digest (name@sha256:<64 hex>), got {base!r}; "
                                  f"`podman image inspect --format '{{{{.Digest}}}}' IMAGE` gives it")
        image = base
    if runtime in ("podman", "docker") and bool(image) == bool(container):
        pr.add("target", f"runtime {runtime!r} needs exactly one of `image` (a fresh container per build) "
                         f"or `container` (exec into a running one)")
    if runtime == "host" and (image or container):
        pr.add("target", "`image`/`container` need runtime = \"podman\" or \"docker\"")
    python = t.get("python", "python3")
    if isinstance(python, str) and not python.strip():
        pr.add("target.python", "must name an interpreter, e.g. \"python3\" or \"/usr/bin/python3.12\"")
    return TargetSpec(runtime=runtime if isinstance(runtime, str) else "host",
                      python=python if isinstance(python, str) else "python3",
                      image=image if isinstance(image, str) else "",
                      container=container if isinstance(container, str) else "",
                      run_args=pr.str_list(t, "run-args", "target.run-args"),
                      engine_args=pr.str_list(t, "engine-args", "target.engine-args"),
                      base=base if isinstance(base, str) else "")


def _mirrors(m: Any, pr: _Problems) -> tuple[tuple[str, str], ...]:
    if not isinstance(m, dict):
        return ()
    out = []
    for k, v in m.items():
        if not isinstance(v, str) or not v:
            pr.add(f"mirrors.{k}", "must map a URL prefix to a URL prefix or directory (a string)")
        else:
            out.append((k, v))
    return tuple(out)


def _components(comps: Any, pr: _Problems, own: Origin, declared: Mapping[str, Origin],
                pinned: bool = True, recorded: Recorded | None = None) -> tuple[Component, ...]:
    if not isinstance(comps, dict) or not comps:
        pr.add("components", "a recipe needs at least one [components.NAME] table")
        return ()
    built: dict[str, Component] = {}
    for name, c in comps.items():
        where = f"components.{name}"
        if not NAME.match(name):
            pr.add(where, "component names are lower-case letters, digits, '.', '_' and '-'")
        if not isinstance(c, dict):
            pr.add(where, "must be a table")
            continue
        pr.check_keys(c, COMPONENT_KEYS, f"{where}.")
        if "prebuilt" in c:
            built[name] = _prebuilt_component(name, c, pr, where)
            continue
        url = c.get("url")
        if not isinstance(url, str) or not url:
            pr.add(f"{where}.url", "missing: the git repository URL to build from")
        commit = c.get("commit")
        if pinned and (not isinstance(commit, str) or not HEX40.match(commit)):
            pr.add(f"{where}.commit", "missing or not a full 40-hex commit id "
                   f"(got {commit!r}); run `toolchain update --recipe ... --component {name}` to pin `ref`")
        subdir = c.get("subdir", "")
        if isinstance(subdir, str) and (subdir.startswith("/") or ".." in Path(subdir).parts):
            pr.add(f"{where}.subdir", "must be a relative path inside the repository")
        kept = _Kept(recorded, name)
        patches = _patches(c.get("patches", []), pr, f"{where}.patches", declared.get(f"{where}.patches", own), kept)
        extend = c.get("extend-patches", [])
        for i, entry in enumerate(extend if isinstance(extend, list) else []):
            key = f"{where}.extend-patches"
            patches += _patches([entry], pr, f"{key}[{i}]", declared.get(f"{key}.{i}", own), kept, numbered=False)
        command = pr.str_list(c, "command", f"{where}.command") if "command" in c else DEFAULT_COMMAND
        if c.get("command") == []:  # (a list with a non-string is reported by str_list, not as empty)
            pr.add(f"{where}.command", "must not be empty")
        for arg in command:
            for ph in _placeholders(arg):
                if ph not in PLACEHOLDERS:
                    pr.add(f"{where}.command", f"unknown placeholder {{{ph}}}{did_you_mean(ph, list(PLACEHOLDERS))}; "
                                               f"known: {', '.join('{'+p+'}' for p in PLACEHOLDERS)}")
        venv = c.get("version-env", DEFAULT_VERSION_ENV)
        if isinstance(venv, str) and not ENV_NAME.match(venv):
            pr.add(f"{where}.version-env", "not a valid environment variable name")
        fetch = _fetchcontent(c.get("fetchcontent", []), pr, where)
        unused = _unpinned(c.get("fetchcontent-unused", {}), pr, f"{where}.fetchcontent-unused", fetch)
        network = _unpinned(c.get("fetchcontent-network", {}), pr, f"{where}.fetchcontent-network", fetch)
        cenv = pr.env_table(c.get("env", {}), f"{where}.env")
        buildspec.check_job_env(dict(cenv), f"{where}.env", pr.add)
        jobs, memory_per_job = buildspec.component_build(c, where, pr.add)
        built[name] = Component(
            name=name, url=url if isinstance(url, str) else "", commit=commit if isinstance(commit, str) else "",
            ref=_str(c, "ref"),
            subdir=subdir.strip("/") if isinstance(subdir, str) else "", patches=patches,
            after=pr.str_list(c, "after", f"{where}.after"),
            version=_str(c, "version"),
            version_env=venv if isinstance(venv, str) else DEFAULT_VERSION_ENV,
            dist=_str(c, "dist", name),
            import_name=_str(c, "import"),
            install_args=pr.str_list(c, "install-args", f"{where}.install-args") if "install-args" in c
            else DEFAULT_INSTALL_ARGS,
            command=command, env=cenv, fetchcontent=fetch, fetchcontent_unused=unused,
            fetchcontent_network=network, jobs=jobs, memory_per_job=memory_per_job,
            built_against=_dist_names(pr, c, "built-against", f"{where}.built-against"),
            prebuilt_index=_prebuilt_index(c, pr, where),
            inputs=_inputs(pr.str_list(c, "inputs", f"{where}.inputs"), pr, f"{where}.inputs",
                           declared.get(f"{where}.inputs", own), kept))
    return _order(built, pr)


REQUIREMENT = Regex(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")


def _prebuilt_component(name: str, c: dict[str, Any], pr: _Problems, where: str) -> Component:
    """`prebuilt = "dist==version"` (from the [resolve] indexes and find-links) or `prebuilt = {url, sha256}`
    (one file): a released wheel, never compiled, so nothing that only a build reads may be set."""
    for key in c:
        if key in COMPONENT_KEYS and key not in PREBUILT_KEYS:
            pr.add(f"{where}.{key}", "a prebuilt component is never compiled, so it takes no "
                                     f"{key!r}; remove it (or remove `prebuilt` to build it from source)")
    value = c["prebuilt"]
    prebuilt = Prebuilt()
    if isinstance(value, str):
        m = REQUIREMENT.match(value.strip())
        if m is None:
            pr.add(f"{where}.prebuilt", f"{value!r} is not an exact pin; write \"dist==version\" (e.g. "
                                        f"\"vllm-xpu-kernels==0.1.16.2\") or a table {{url, sha256}}")
        prebuilt = Prebuilt(requirement=value.strip())
    elif isinstance(value, dict):
        pr.check_keys(value, {"url": str, "sha256": str}, f"{where}.prebuilt.")
        url, sha = value.get("url"), value.get("sha256")
        if not isinstance(url, str) or not url.endswith(".whl"):
            pr.add(f"{where}.prebuilt.url", f"must be the URL of one wheel file (…/name-version-tags.whl), got {url!r}")
        elif URL_CREDENTIALS.match(url):
            pr.add(f"{where}.prebuilt.url", "a URL with credentials would be recorded in the lock; "
                                            "put them in ~/.netrc instead")
        if not isinstance(sha, str) or not SHA256_HEX.match(sha):
            pr.add(f"{where}.prebuilt.sha256", "missing or not the 64-hex sha256 of the wheel: the file is "
                                               "refused unless it hashes as the recipe says")
        prebuilt = Prebuilt(url=url if isinstance(url, str) else "", sha256=sha if isinstance(sha, str) else "")
    else:
        pr.add(f"{where}.prebuilt", f"must be \"dist==version\" or a table {{url, sha256}}, got {value!r}")
    m = REQUIREMENT.match(prebuilt.requirement)
    dist = _str(c, "dist", m.group(1) if m else name)
    commit = _str(c, "commit")
    if commit and not HEX40.match(commit):
        pr.add(f"{where}.commit", f"must be the full 40-hex commit the wheel was built from, got {commit!r}")
    return Component(name=name, url="", commit=commit, ref=_str(c, "ref"), after=pr.str_list(c, "after", f"{where}.after"), dist=dist,
                     import_name=_str(c, "import"),
                     install_args=pr.str_list(c, "install-args", f"{where}.install-args") if "install-args" in c
                     else DEFAULT_INSTALL_ARGS, command=(), prebuilt=prebuilt)


def _prebuilt_index(c: dict[str, Any], pr: _Problems, where: str) -> str:
    index = c.get("prebuilt-index", "")
    if not isinstance(index, str) or not index:
        return ""
    if URL_CREDENTIALS.match(index):
        pr.add(f"{where}.prebuilt-index", "a URL with credentials would be recorded in the lock; "
                                          "put them in ~/.netrc instead")
    return index


MAX_SUGGESTIONS = 20  # "did you mean" for the first unknown names only: each compares against every name
MAX_NAMED = 10  # components named in a cycle message


def _order(comps: dict[str, Component], pr: _Problems) -> tuple[Component, ...]:
    """Dependency order (`after`), stable in declaration order (of the components whose `after` is met, the
    first declared comes first); unknown names and cycles are problems. Linear in components + edges (Kahn's
    algorithm over a heap of declaration indexes): 10,000 components order in milliseconds."""
    import heapq

    index = {name: i for i, name in enumerate(comps)}
    listed = list(comps.values())
    waiting = [0] * len(listed)            # unplaced components each waits for
    dependents: list[list[int]] = [[] for _ in listed]
    suggested = 0
    for i, c in enumerate(listed):
        for dep in dict.fromkeys(c.after):
            if dep not in comps:
                hint = did_you_mean(dep, list(comps)) if suggested < MAX_SUGGESTIONS else ""
                suggested += 1
                pr.add(f"components.{c.name}.after", f"unknown component {dep!r}{hint}")
            elif dep == c.name:
                pr.add(f"components.{c.name}.after", "a component cannot come after itself")
            else:
                waiting[i] += 1
                dependents[index[dep]].append(i)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    ordered: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        ordered.append(i)
        for j in dependents[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    if len(ordered) < len(listed):
        placed = set(ordered)
        pending = [i for i in range(len(listed)) if i not in placed]
        names = ", ".join(listed[i].name for i in pending[:MAX_NAMED])
        more = f" and {len(pending) - MAX_NAMED} more" if len(pending) > MAX_NAMED else ""
        pr.add("components", f"`after` forms a cycle among: {names}{more}")
        ordered += pending
    return tuple(listed[i] for i in ordered)


def _smoke(s: Any, pr: _Problems, *, in_lock: bool = False) -> SmokeSpec:
    if not isinstance(s, dict):
        return SmokeSpec()
    pr.check_keys(s, SMOKE_KEYS, "smoke.")

    def num(key: str) -> int:
        value = s.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            return 0  # absent, or a wrong type (check_keys says so)
        if value <= 0:
            pr.add(f"smoke.{key}", "must be a positive integer")
        return max(value, 0)

    device, tp = _str(s, "device"), num("tensor-parallel-size")
    if device and device not in PROFILES:
        pr.add("smoke.device", f"unknown device {device!r}{did_you_mean(device, list(PROFILES))}; "
                               f"use {' or '.join(PROFILES)}")
    elif device and tp and tp not in PROFILES[device].tensor_parallel_sizes:
        pr.add("smoke.tensor-parallel-size", f"{tp} is not supported on {device} "
                                              f"(allowed: {', '.join(map(str, PROFILES[device].tensor_parallel_sizes))})")
    ladder = s.get("ladder")
    return SmokeSpec(model=_str(s, "model"), served_model_name=_str(s, "served-model-name"), device=device,
                     tensor_parallel_size=tp, port=num("port"), max_model_len=num("max-model-len"),
                     serve_cmd=pr.str_list(s, "serve-cmd", "smoke.serve-cmd"),
                     serve_args=pr.str_list(s, "serve-args", "smoke.serve-args"),
                     env=pr.env_table(s.get("env", {}), "smoke.env", secrets=in_lock),
                     cases=pr.str_list(s, "cases", "smoke.cases"),
                     custom_cases=tuple(_tables(s.get("custom-cases"))),
                     repeat=num("repeat"),
                     ladder=tuple(_tables(ladder)) if isinstance(ladder, list) else None,
                     ready_timeout=float(num("ready-timeout")), request_timeout=float(num("request-timeout")),
                     suite=_suite(s.get("suite"), pr), raw=dict(s))


def _suite(s: Any, pr: _Problems) -> SuiteSpec | None:
    if not isinstance(s, dict):
        return None
    pr.check_keys(s, SUITE_KEYS, "smoke.suite.")
    where = "smoke.suite"
    folder = _str(s, "dir")
    for key, value in (("component", _str(s, "component")), ("dir", folder)):
        if not value:
            pr.add(f"{where}.{key}", "missing: the component whose tests run, and their folder in its repository")
    tests = pr.str_list(s, "tests", f"{where}.tests")
    for rel in (folder, *tests):
        if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
            pr.add(where, f"{rel!r}: paths are relative, inside the repository")
    reruns = s.get("reruns", 0)
    if not isinstance(reruns, int) or isinstance(reruns, bool) or not 0 <= reruns <= MAX_RERUNS:
        pr.add(f"{where}.reruns", f"{reruns!r}: how often a failed test runs again, 0 to {MAX_RERUNS}")
        reruns = 0
    return SuiteSpec(component=_str(s, "component"), dir=folder, tests=tests,
                     args=pr.str_list(s, "args", f"{where}.args"), reruns=reruns)


def _tables(value: object) -> list[dict[str, Any]]:
    """The tables of an array of tables (anything else in it is kept as an empty table, for its reader to name)."""
    return [dict(t) if isinstance(t, dict) else {} for t in value] if isinstance(value, list) else []


def smoke_spec(table: Mapping[str, Any], where: str) -> SmokeSpec:
    """A lock's `[smoke]` table (the recipe's, kept as written), typed as the recipe's was; its problems raise
    one RecipeError naming `where`."""
    pr = _Problems(Path(where))
    spec = _smoke(dict(table), pr, in_lock=True)
    if pr.items:
        raise RecipeError(pr.items)
    return spec


DIST_NAME = Chars(ASCII_LETTERS + DIGITS + "._-", first=ASCII_LETTERS + DIGITS, last=ASCII_LETTERS + DIGITS)


def _dist_names(pr: _Problems, table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    names = pr.str_list(table, key, where)
    for n in names:
        if not DIST_NAME.match(n):
            pr.add(where, f"{n!r} is not a distribution name (e.g. \"torch\")")
    return names


# uv's --python-platform names: x86_64-manylinux_2_28, aarch64-unknown-linux-gnu, linux, wasm32-pyodide2024
_PLATFORM = Regex(r"^[a-z0-9_.]+(?:-[a-z0-9_.]+){0,3}$")


def _native(n: Any, pr: _Problems) -> NativeSpec:
    """`[native] host-provides = ["libfoo.so.1", "libnvidia-*"]`, `ignore = [...]`: sonames or fnmatch patterns."""
    if not isinstance(n, dict):
        return NativeSpec()
    pr.check_keys(n, NATIVE_KEYS, "native.")
    found = {}
    for key in NATIVE_KEYS:
        names = pr.str_list(n, key, f"native.{key}")
        for name in names:
            if not SONAME_PATTERN.match(name):
                pr.add(f"native.{key}", f"{name!r} is not a soname or a pattern of one (such as \"libze_loader.so.1\" "
                                        f"or \"libmpi.so.*\"): no '/', no spaces")
        found[key] = names
    return NativeSpec(host_provides=found["host-provides"], ignore=found["ignore"])


def _resolve(r: Any, pr: _Problems, path: Path) -> ResolveSpec:
    if not isinstance(r, dict):
        return ResolveSpec()
    pr.check_keys(r, RESOLVE_KEYS, "resolve.")
    strategy = r.get("index-strategy", ResolveSpec.index_strategy)
    if isinstance(strategy, str) and strategy not in INDEX_STRATEGIES:
        pr.add("resolve.index-strategy", f"unknown strategy {strategy!r}{did_you_mean(strategy, INDEX_STRATEGIES)}; "
                                         f"use one of {', '.join(INDEX_STRATEGIES)}")
    indexes = pr.str_list(r, "indexes", "resolve.indexes") if "indexes" in r else ResolveSpec.indexes
    for url in indexes:
        if "://" not in url:
            pr.add("resolve.indexes", f"{url!r} is not a URL (a PEP 503 simple index, e.g. {DEFAULT_INDEX})")
        elif URL_CREDENTIALS.match(url):
            pr.add("resolve.indexes", f"{redact_url(url)}: a URL with credentials would be recorded in the lock "
                                      f"and shown in logs; put them in ~/.netrc or a keyring instead")
    links = []
    for link in pr.str_list(r, "find-links", "resolve.find-links"):
        if URL_CREDENTIALS.match(link):
            pr.add("resolve.find-links", f"{redact_url(link)}: a URL with credentials would be recorded in the lock "
                                         f"and shown in logs; put them in ~/.netrc or a keyring instead")
            continue
        if "://" in link or link.startswith("{demo}"):  # {demo}: the demo's shipped files (toolchain.resolve)
            links.append(link)
            continue
        links.append(str((path.parent / link).resolve()))  # checked when resolving: a lock's recipe loads anywhere
    plat = r.get("platform", "")
    if isinstance(plat, str) and plat and not _PLATFORM.match(plat):
        pr.add("resolve.platform", f"{plat!r} is not a platform name: uv's --python-platform, such as "
                                   f"\"x86_64-manylinux_2_28\", \"aarch64-unknown-linux-gnu\" or \"linux\" "
                                   f"(lower-case letters, digits, '_', '.' and '-')")
    version = r.get("python-version", "")
    if isinstance(version, str) and version and not re.match(r"^3\.\d+$", version):
        pr.add("resolve.python-version", f"must be MAJOR.MINOR such as \"3.12\", got {version!r}")
    return ResolveSpec(indexes=indexes, find_links=tuple(links),
                       index_strategy=strategy if isinstance(strategy, str) else ResolveSpec.index_strategy,
                       platform=r.get("platform", "") if isinstance(r.get("platform", ""), str) else "",
                       python_version=version if isinstance(version, str) else "")
