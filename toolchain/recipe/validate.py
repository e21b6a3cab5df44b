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

from toolchain.core import blobs
from toolchain.core.devices import PROFILES
from toolchain.core.fs import sha256_file
from toolchain.core.names import did_you_mean
from toolchain.core.redact import is_secret, redact_url
from toolchain.core.regex import HEX40, SHA256, SHA256_HEX, URL_CREDENTIALS, Regex
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
    FetchContentDep,
    InputFile,
    NativeSpec,
    Origin,
    Patch,
    Prebuilt,
    Recipe,
    Recorded,
    ResolveSpec,
    SmokeSpec,
    TargetSpec,
    ToolchainSpec,
)

PLACEHOLDERS = ("python", "src", "out")
RUNTIMES = ("host", "podman", "docker")
ENV_NAME = Regex(r"^[A-Za-z_][A-Za-z0-9_]*$")
CMAKE_NAME = Regex(r"^[A-Za-z0-9_.+-]+$")
NAME = Regex(r"^[a-z0-9][a-z0-9._-]*$")

# each table's keys, from the model fields they fill (recipe/keys.py), and the keys that fill no field
TOP_KEYS = keys_of(Recipe, extends=str)
NATIVE_KEYS = keys_of(NativeSpec)
SONAME_PATTERN = Regex(r"^[A-Za-z0-9_.+*?\[\]-]+$")
RESOLVE_KEYS = keys_of(ResolveSpec)
TOOLCHAIN_KEYS = keys_of(ToolchainSpec)
TARGET_KEYS = keys_of(TargetSpec)
PINNED_IMAGE = Regex(rf"^[^\s@]+@sha256:{SHA256}$")
COMPONENT_KEYS = keys_of(Component, extend_patches=list, drop=bool)
FETCH_KEYS = keys_of(FetchContentDep)
SMOKE_KEYS = keys_of(SmokeSpec)


class MissingFiles(RecipeError):
    """A recipe read back from a lock names local files (patches, inputs) that are neither where the lock
    records them nor kept in the cache: the recipe text is fine, the files have to be supplied."""

    heading = "a locked file is missing"

    def __init__(self, problems: list[str] | str, *, hint: str | None = None) -> None:
        listed = [problems] if isinstance(problems, str) else list(problems)
        super().__init__(listed if len(listed) > 1 else [f"{self.heading}: {listed[0]}"], hint=hint)
        self.problems = listed


class _Problems:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[str] = []
        self.missing = 0  # of `items`: recorded files found nowhere (MissingFiles)

    def add(self, key: str, message: str, *, file: Path | None = None) -> None:
        """A problem with `key`, named against the recipe file that declared it (`file`, default: this)."""
        self.items.append(f"{(file or self.path).name}: {key}: {message}")

    def check_keys(self, table: dict[str, Any], allowed: Mapping[str, type], prefix: str, *,
                   file: Path | None = None) -> None:
        for key, value in table.items():
            where = f"{prefix}{key}"
            if key not in allowed:
                self.add(where, "unknown key" + did_you_mean(key, list(allowed)) + " (remove it or fix the name)",
                         file=file)
                continue
            want = allowed[key]
            ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
            if not ok:
                self.add(where, f"must be {_type_name(want)}, got {_type_name(type(value))} {value!r}", file=file)

    def str_list(self, table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
        value = table.get(key, [])
        if not isinstance(value, list):
            return ()
        bad = [v for v in value if not isinstance(v, str)]
        if bad:
            self.add(where, f"must be a list of strings; quote {bad[0]!r}")
            return ()
        return tuple(value)

    def env_table(self, table: Any, where: str, *, secrets: bool = False) -> tuple[tuple[str, str], ...]:
        """`secrets`: a secret's name is allowed (a lock's table, whose values were redacted when written)."""
        if not isinstance(table, dict):
            return ()
        out = []
        for k, v in table.items():
            if not ENV_NAME.match(k):
                self.add(f"{where}.{k}", "not a valid environment variable name")
            elif not isinstance(v, str):
                self.add(f"{where}.{k}", f"environment values are strings; write {k} = \"{v}\"")
            elif is_secret(k) and not secrets:
                self.add(f"{where}.{k}", "looks like a secret; recipes are committed and recorded in locks — "
                                         "export it in your environment instead")
            else:
                out.append((k, v))
        return tuple(out)


def _str(table: dict[str, Any], key: str, default: str = "") -> str:
    """table[key] when it is a string (a wrong type is reported by check_keys), else `default`."""
    value = table.get(key, default)
    return value if isinstance(value, str) else default


def _type_name(t: type) -> str:
    return {str: "a string", list: "an array", dict: "a table", int: "an integer", bool: "true or false",
            float: "a number"}.get(t, t.__name__)


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
            for ph in re.findall(r"\{([^}]*)\}", arg):
                if ph not in PLACEHOLDERS:
                    pr.add(f"{where}.command", f"unknown placeholder {{{ph}}}{did_you_mean(ph, list(PLACEHOLDERS))}; "
                                               f"known: {', '.join('{'+p+'}' for p in PLACEHOLDERS)}")
        venv = c.get("version-env", DEFAULT_VERSION_ENV)
        if isinstance(venv, str) and not ENV_NAME.match(venv):
            pr.add(f"{where}.version-env", "not a valid environment variable name")
        fetch = _fetchcontent(c.get("fetchcontent", []), pr, where)
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
            command=command, env=cenv, fetchcontent=fetch, jobs=jobs, memory_per_job=memory_per_job,
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


class _Kept:
    """One component's files as a lock records them (`Recorded`): the copy the cache keeps of a file whose
    recorded place is empty, or the problem naming it, its sha256 and every place looked."""

    def __init__(self, recorded: Recorded | None, component: str) -> None:
        self.recorded, self.component = recorded, component

    def find(self, what: str, label: str, looked: Sequence[Path], pr: _Problems, where: str,
             origin: Origin) -> Path | None:
        """None (a problem added) unless the lock records `label` and the cache keeps a file of its hash."""
        sha = self.recorded.sha256.get((self.component, label)) if self.recorded is not None else None
        if sha is None or self.recorded is None:
            pr.add(where, f"{what} {label} is not in " + ", ".join(map(str, looked)) + ", and the lock records "
                          "no sha256 for it", file=origin.file)
            return None
        searched = self.candidates(label)
        kept = next((c for c in searched if c.is_file() and sha256_file(c) == sha), None) \
            or blobs.find(self.recorded.cache_dir, sha)
        if kept is not None:
            return kept
        places = [*map(str, dict.fromkeys([*looked, *searched])),
                  f"the cache ({blobs.blob_path(self.recorded.cache_dir, sha)})"
                  if self.recorded.cache_dir is not None else "no cache"]
        pr.add(where, f"{what} {label} (sha256 {sha}) is missing: looked in " + ", ".join(places), file=origin.file)
        pr.missing += 1
        return None

    def candidates(self, label: str) -> list[Path]:
        """Where a file recorded as `label` may be in the search folders: under its recorded path, and by its
        name in the folder of this component's inputs (a bundle's inputs/<component>/)."""
        name = Path(label).name
        dirs = self.recorded.search if self.recorded is not None else ()
        found = [d / label for d in dirs] + [d / "inputs" / self.component / name for d in dirs]
        return list(dict.fromkeys(found))

    @property
    def active(self) -> bool:
        return self.recorded is not None


def _inputs(paths: Sequence[str], pr: _Problems, where: str, origin: Origin,
            kept: _Kept | None = None) -> tuple[InputFile, ...]:
    """Declared input files, relative to the recipe that names them (or absolute), each with its sha256."""
    out = []
    for i, rel in enumerate(paths):
        path = Path(rel).expanduser()
        path = path if path.is_absolute() else origin.dir / path
        if not path.is_file():
            if kept is not None and kept.active:
                found = kept.find("input", rel, [path], pr, f"{where}[{i}]", origin)
                if found is not None:
                    out.append(InputFile(rel, sha256_file(found), found))
                continue
            pr.add(f"{where}[{i}]", f"{rel}: no such file (relative paths are to {origin.file.name})",
                   file=origin.file)
            continue
        out.append(InputFile(rel, sha256_file(path), path.resolve()))
    return tuple(out)


PATCH_KEYS = keys_of(Patch)
REMOTE_PATCH_KEYS = tuple(PATCH_KEYS)  # a pinned patch table needs every one


def _patches(items: Any, pr: _Problems, where: str, origin: Origin, kept: _Kept | None = None, *,
             numbered: bool = True) -> tuple[Patch, ...]:
    if not isinstance(items, list):
        return ()
    out = []
    for i, p in enumerate(items):
        w = f"{where}[{i}]" if numbered else where
        if isinstance(p, str):
            local = _local_patch(p, origin, pr, w, kept)
            if local is not None:
                out.append(local)
        elif isinstance(p, dict):
            remote = _remote_patch(p, origin, pr, w)
            if remote is not None:
                out.append(remote)
        else:
            pr.add(w, f"entries are file names under patches/ or tables {{url, commit, path, sha256}}, got {p!r}",
                   file=origin.file)
    return tuple(out)


def _local_patch(rel: str, origin: Origin, pr: _Problems, where: str, kept: _Kept | None = None) -> Patch | None:
    """A file under the patches/ directory of the recipe that names it: no absolute path, no `..`, and no
    symlink leading out of that directory."""
    table = "a patch from anywhere else is a pinned table {url, commit, path, sha256}"
    dirs = " or ".join(str(d) for d in origin.patches_dirs)
    parts = PurePosixPath(rel).parts
    if not rel.strip() or PurePosixPath(rel).is_absolute() or Path(rel).is_absolute() or "\\" in rel:
        pr.add(where, f"patch {rel!r} is not a path relative to {dirs}; {table}", file=origin.file)
        return None
    if ".." in parts:
        pr.add(where, f"patch {rel!r} leaves {dirs} ('..' is not allowed); {table}", file=origin.file)
        return None
    for pdir in origin.patches_dirs:
        candidate = pdir / rel
        if not (candidate.exists() or candidate.is_symlink()):
            continue
        real, root = candidate.resolve(), pdir.resolve()
        if not real.is_relative_to(root):
            pr.add(where, f"patch {rel!r} is a symlink to {real}, outside {pdir}; {table}", file=origin.file)
        elif not real.is_file():
            pr.add(where, f"patch {rel!r} in {pdir} is not a file", file=origin.file)
        else:
            return Patch(rel, sha256_file(real), file=real)
        return None
    if kept is not None and kept.active:  # a lock's recipe: the cache's copy of the recorded hash
        found = kept.find("patch", rel, [d / rel for d in origin.patches_dirs], pr, where, origin)
        return Patch(rel, sha256_file(found), file=found) if found is not None else None
    pr.add(where, f"patch {rel!r} not found in {dirs} (paths are relative to patches/ beside "
                  f"{origin.file.name}, or beside its recipes/ directory; {table})", file=origin.file)
    return None


def _remote_patch(p: dict[str, Any], origin: Origin, pr: _Problems, where: str) -> Patch | None:
    pr.check_keys(p, PATCH_KEYS, f"{where}.", file=origin.file)
    missing = [k for k in REMOTE_PATCH_KEYS if not isinstance(p.get(k), str) or not p.get(k)]
    if missing:
        pr.add(where, f"a patch from another repository needs url, commit, path and sha256; missing "
                      f"{', '.join(missing)}", file=origin.file)
        return None
    ok = True
    if not HEX40.match(p["commit"]):
        pr.add(f"{where}.commit", f"must be a 40-hex commit id, got {p['commit']!r}", file=origin.file)
        ok = False
    if not SHA256_HEX.match(p["sha256"]):
        pr.add(f"{where}.sha256", "must be the 64-hex sha256 of the patch file", file=origin.file)
        ok = False
    path = PurePosixPath(p["path"])
    if path.is_absolute() or ".." in path.parts:
        pr.add(f"{where}.path", f"must be a path inside that repository (relative, no '..'), got {p['path']!r}",
               file=origin.file)
        ok = False
    return Patch(p["path"], p["sha256"], url=p["url"], commit=p["commit"]) if ok else None


def _fetchcontent(items: Any, pr: _Problems, where: str) -> tuple[FetchContentDep, ...]:
    if not isinstance(items, list):
        return ()
    out, seen = [], set()
    for i, f in enumerate(items):
        w = f"{where}.fetchcontent[{i}]"
        if not isinstance(f, dict):
            pr.add(w, "must be a table with name, url and commit")
            continue
        pr.check_keys(f, FETCH_KEYS, f"{w}.")
        name, url, commit = f.get("name"), f.get("url"), f.get("commit")
        if not isinstance(name, str) or not CMAKE_NAME.match(name or ""):
            pr.add(f"{w}.name", "missing: the name used in FetchContent_Declare")
        elif name.upper() in seen:
            pr.add(f"{w}.name", f"{name!r} is declared twice")
        else:
            seen.add(name.upper())
        if not isinstance(url, str) or not url:
            pr.add(f"{w}.url", "missing: the repository to pre-fetch")
        if not isinstance(commit, str) or not HEX40.match(commit):
            pr.add(f"{w}.commit", f"must be a 40-hex commit id, got {commit!r}")
        env = f.get("env", "")
        if isinstance(env, str) and env and not ENV_NAME.match(env):
            pr.add(f"{w}.env", "not a valid environment variable name")
        if isinstance(name, str) and isinstance(url, str) and isinstance(commit, str):
            out.append(FetchContentDep(name, url, commit, env if isinstance(env, str) else ""))
    return tuple(out)


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
                     raw=dict(s))


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


def _dist_names(pr: _Problems, table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    names = pr.str_list(table, key, where)
    for n in names:
        if not re.match(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$", n):
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
