"""Recipes: `recipes/NAME.toml` → a validated, frozen `Recipe` (with `extends` resolved).

Validation collects every problem at once, each naming the file, the key and what to do, and raises one
`RecipeError` (exit 2). Nothing is written while a recipe is loaded.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from toolchain.core import toml as tomlio
from toolchain.core.fs import sha256_bytes
from toolchain.core.redact import is_secret
from toolchain.errors import RecipeError

RECIPES_ENV = "TOOLCHAIN_RECIPES_DIR"
DEFAULT_INDEX = "https://pypi.org/simple"
INDEX_STRATEGIES = ("first-index", "unsafe-first-match", "unsafe-best-match")
DEFAULT_COMMAND = ("{python}", "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "{src}", "-w", "{out}")
DEFAULT_INSTALL_ARGS = ("--no-deps", "--force-reinstall")
PLACEHOLDERS = ("python", "src", "out")
RUNTIMES = ("host", "podman", "docker")
DEVICES = {"b60": (1,), "b70": (1, 2)}  # allowed tensor-parallel sizes per card profile
HEX40 = re.compile(r"^[0-9a-f]{40}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CMAKE_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass(frozen=True)
class FetchContentDep:
    """A CMake FetchContent dependency pre-fetched at a pinned commit and handed to CMake."""
    name: str
    url: str
    commit: str
    env: str = ""  # pass the checkout path in this env var instead of -DFETCHCONTENT_SOURCE_DIR_<NAME>

    @property
    def cmake_var(self) -> str:
        return "FETCHCONTENT_SOURCE_DIR_" + self.name.upper()


@dataclass(frozen=True)
class PatchSpec:
    """A patch: a file under patches/ (`path`), or a file of another repository pinned by commit and sha256
    (an integrator's patch, such as intel/llm-scaler's vLLM patch, used without copying it here)."""
    path: str
    url: str = ""
    commit: str = ""
    sha256: str = ""

    @property
    def remote(self) -> bool:
        return bool(self.url)

    @property
    def label(self) -> str:
        return f"{self.url}@{self.commit[:12]}:{self.path}" if self.url else self.path


@dataclass(frozen=True)
class Component:
    name: str
    url: str
    commit: str
    ref: str = ""
    subdir: str = ""
    patches: tuple[PatchSpec, ...] = ()
    after: tuple[str, ...] = ()
    version: str = ""
    version_env: str = "SETUPTOOLS_SCM_PRETEND_VERSION"
    dist: str = ""
    import_name: str = ""
    install_args: tuple[str, ...] = DEFAULT_INSTALL_ARGS
    command: tuple[str, ...] = DEFAULT_COMMAND
    env: tuple[tuple[str, str], ...] = ()
    fetchcontent: tuple[FetchContentDep, ...] = ()
    built_against: tuple[str, ...] = ()  # distributions whose C++ ABI the compiled wheel depends on (torch)


@dataclass(frozen=True)
class ResolveSpec:
    """`[resolve]`: where the runtime closure of the built wheels is resolved from (toolchain.resolve).
    No index and no find-links: nothing is resolved from anywhere (a closure with requirements fails)."""
    indexes: tuple[str, ...] = (DEFAULT_INDEX,)   # the first is the primary index, the rest extra indexes
    find_links: tuple[str, ...] = ()              # directories (relative to the recipe file) or URLs
    index_strategy: str = "first-index"           # uv's --index-strategy
    platform: str = ""                            # uv's --python-platform; default: from the probed target
    python_version: str = ""                      # default: the probed target's major.minor


@dataclass(frozen=True)
class ToolchainSpec:
    setvars: str = "/opt/intel/oneapi/setvars.sh"
    setvars_args: tuple[str, ...] = ("--force",)

    @property
    def enabled(self) -> bool:
        return bool(self.setvars)


@dataclass(frozen=True)
class TargetSpec:
    runtime: str = "host"
    python: str = "python3"
    image: str = ""
    container: str = ""
    run_args: tuple[str, ...] = ()
    engine_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class SmokeSpec:
    model: str = ""
    device: str = "b70"
    tensor_parallel_size: int = 1
    serve_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cases: tuple[str, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Recipe:
    name: str
    path: Path
    description: str
    toolchain: ToolchainSpec
    target: TargetSpec
    env: tuple[tuple[str, str], ...]
    mirrors: tuple[tuple[str, str], ...]
    components: tuple[Component, ...]  # in dependency (build and install) order
    smoke: SmokeSpec
    demo: bool
    patches_dir: Path
    resolve: ResolveSpec = ResolveSpec()
    data: dict[str, Any] = field(compare=False, hash=False, default_factory=dict)  # resolved table

    @functools.cached_property
    def text(self) -> str:
        """The resolved recipe (extends applied) as TOML: what a lock records and rebuilds from."""
        return tomlio.dumps(self._resolved())

    @functools.cached_property
    def sha256(self) -> str:
        """sha256 of `text`, the resolved recipe a lock records."""
        return sha256_bytes(self.text.encode())

    def _resolved(self) -> dict[str, Any]:
        return {k: v for k, v in self.data.items() if k != "extends"}

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise RecipeError(f"{self.path}: no component {name!r}" + did_you_mean(name, [c.name for c in self.components]),
                          hint=f"components of {self.name}: {', '.join(c.name for c in self.components)}")


# ---- locating recipes -------------------------------------------------------------------------------

def default_recipes_dir() -> Path:
    if os.environ.get(RECIPES_ENV):
        return Path(os.environ[RECIPES_ENV])
    if Path("recipes").is_dir():
        return Path("recipes").resolve()
    return Path(__file__).resolve().parents[2] / "recipes"


def recipe_path(name_or_path: str, recipes_dir: Path | None = None) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.is_file():
        return p.resolve()
    rdir = recipes_dir or default_recipes_dir()
    candidate = rdir / f"{name_or_path}.toml"
    if candidate.is_file():
        return candidate.resolve()
    known = sorted(q.stem for q in rdir.glob("*.toml")) if rdir.is_dir() else []
    raise RecipeError(f"no recipe {name_or_path!r} in {rdir}" + did_you_mean(name_or_path, known),
                      hint=f"available: {', '.join(known) or 'none'}; `toolchain recipes` lists them, "
                           f"or pass a path to a .toml file")


def list_recipes(recipes_dir: Path | None = None) -> list[tuple[str, str]]:
    rdir = recipes_dir or default_recipes_dir()
    out = []
    for p in sorted(rdir.glob("*.toml")):
        try:
            desc = str(tomlio.load_file(p).get("description", ""))
        except tomlio.TOMLDecodeError:
            desc = "(not valid TOML)"
        out.append((p.stem, desc))
    return out


# ---- loading ------------------------------------------------------------------------------------------

def load_recipe(name_or_path: str, recipes_dir: Path | None = None, patches_dir: Path | None = None, *,
                pinned: bool = True) -> Recipe:
    """`pinned=False` (for `toolchain update`) accepts components whose `commit` is not set yet."""
    path = recipe_path(name_or_path, recipes_dir)
    data = _resolve_extends(path, recipes_dir or path.parent, [])
    pdir = patches_dir or path.parent.parent / "patches"
    return from_data(data, name=path.stem, path=path, patches_dir=pdir, pinned=pinned)


def load_recipe_text(text: str, name: str, path: Path, patches_dir: Path) -> Recipe:
    """A resolved recipe (as recorded in a lock) back into a Recipe."""
    try:
        data = tomlio.loads(text)
    except tomlio.TOMLDecodeError as exc:
        raise RecipeError(f"{path}: recorded recipe is not valid TOML: {exc}") from None
    return from_data(data, name=name, path=path, patches_dir=patches_dir)


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomlio.load_file(path)
    except tomlio.TOMLDecodeError as exc:
        raise RecipeError(f"{path}: not valid TOML: {exc}", hint="fix the syntax at the line shown") from None


def _resolve_extends(path: Path, recipes_dir: Path, seen: list[Path]) -> dict[str, Any]:
    if path in seen:
        chain = " -> ".join(p.stem for p in [*seen, path])
        raise RecipeError(f"{seen[0]}: extends: cycle {chain}", hint="remove one `extends` from the cycle")
    data = _read(path)
    parent = data.get("extends")
    if parent is None:
        return data
    if not isinstance(parent, str) or not parent:
        raise RecipeError(f"{path}: extends: must be the name of another recipe (a string)")
    try:
        parent_path = recipe_path(parent, recipes_dir)
    except RecipeError as exc:
        raise RecipeError(f"{path}: extends: {exc.problems[0]}", hint=exc.hint) from None
    base = _resolve_extends(parent_path, recipes_dir, [*seen, path])
    base.pop("description", None)
    return _merge(base, {k: v for k, v in data.items() if k != "extends"})


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Tables merge key by key; everything else (arrays included) is replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def with_commit(recipe: Recipe, component: str, commit: str, ref: str | None = None) -> Recipe:
    """A derived recipe with one component pinned elsewhere (used by bisect)."""
    recipe.component(component)
    data = _merge(recipe.data, {"components": {component: {"commit": commit, **({"ref": ref} if ref else {})}}})
    return from_data(data, name=recipe.name, path=recipe.path, patches_dir=recipe.patches_dir)


def with_changes(recipe: Recipe, changes: dict[str, Any]) -> Recipe:
    """A derived recipe with a nested table of keys overridden (same rules as `extends`)."""
    return from_data(_merge(recipe.data, changes), name=recipe.name, path=recipe.path,
                     patches_dir=recipe.patches_dir)


# ---- validation ---------------------------------------------------------------------------------------

TOP_KEYS = {"description": str, "extends": str, "toolchain": dict, "target": dict, "env": dict,
            "mirrors": dict, "components": dict, "smoke": dict, "demo": bool, "resolve": dict}
RESOLVE_KEYS = {"indexes": list, "find-links": list, "index-strategy": str, "platform": str, "python-version": str}
TOOLCHAIN_KEYS = {"setvars": str, "setvars-args": list}
TARGET_KEYS = {"runtime": str, "python": str, "image": str, "container": str, "run-args": list,
               "engine-args": list}
COMPONENT_KEYS = {"url": str, "ref": str, "commit": str, "subdir": str, "patches": list, "after": list,
                  "version": str, "version-env": str, "dist": str, "import": str, "install-args": list,
                  "command": list, "env": dict, "fetchcontent": list, "built-against": list}
FETCH_KEYS = {"name": str, "url": str, "commit": str, "env": str}
SMOKE_KEYS = {"model": str, "device": str, "tensor-parallel-size": int, "serve-args": list, "env": dict,
              "cases": list, "custom-cases": list, "serve-cmd": list, "port": int, "ready-timeout": int,
              "ladder": list, "repeat": int, "max-model-len": int, "served-model-name": str,
              "request-timeout": int}


class _Problems:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[str] = []

    def add(self, key: str, message: str) -> None:
        self.items.append(f"{self.path.name}: {key}: {message}")

    def check_keys(self, table: dict[str, Any], allowed: dict[str, type], prefix: str) -> None:
        for key, value in table.items():
            where = f"{prefix}{key}"
            if key not in allowed:
                self.add(where, "unknown key" + did_you_mean(key, list(allowed)) + " (remove it or fix the name)")
                continue
            want = allowed[key]
            ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
            if not ok:
                self.add(where, f"must be {_type_name(want)}, got {_type_name(type(value))} {value!r}")

    def str_list(self, table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
        value = table.get(key, [])
        if not isinstance(value, list):
            return ()
        bad = [v for v in value if not isinstance(v, str)]
        if bad:
            self.add(where, f"must be a list of strings; quote {bad[0]!r}")
            return ()
        return tuple(value)

    def env_table(self, table: Any, where: str) -> tuple[tuple[str, str], ...]:
        if not isinstance(table, dict):
            return ()
        out = []
        for k, v in table.items():
            if not ENV_NAME.match(k):
                self.add(f"{where}.{k}", "not a valid environment variable name")
            elif not isinstance(v, str):
                self.add(f"{where}.{k}", f"environment values are strings; write {k} = \"{v}\"")
            elif is_secret(k):
                self.add(f"{where}.{k}", "looks like a secret; recipes are committed and recorded in locks — "
                                         "export it in your environment instead")
            else:
                out.append((k, v))
        return tuple(out)


def _type_name(t: type) -> str:
    return {str: "a string", list: "an array", dict: "a table", int: "an integer", bool: "true or false",
            float: "a number"}.get(t, t.__name__)


def did_you_mean(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def from_data(data: dict[str, Any], *, name: str, path: Path, patches_dir: Path, pinned: bool = True) -> Recipe:
    pr = _Problems(path)
    pr.check_keys(data, TOP_KEYS, "")
    tc = data.get("toolchain", {}) if isinstance(data.get("toolchain"), dict) else {}
    pr.check_keys(tc, TOOLCHAIN_KEYS, "toolchain.")
    toolchain = ToolchainSpec(setvars=tc.get("setvars", ToolchainSpec.setvars) if isinstance(tc.get("setvars", ""), str) else "",
                              setvars_args=pr.str_list(tc, "setvars-args", "toolchain.setvars-args")
                              if "setvars-args" in tc else ToolchainSpec.setvars_args)
    target = _target(data.get("target", {}), pr)
    env = pr.env_table(data.get("env", {}), "env")
    mirrors = _mirrors(data.get("mirrors", {}), pr)
    components = _components(data.get("components"), pr, patches_dir, pinned)
    smoke = _smoke(data.get("smoke", {}), pr)
    resolve = _resolve(data.get("resolve", {}), pr, path)
    if pr.items:
        raise RecipeError(pr.items, hint=f"fix {path} (each line names the key); see docs/DESIGN.md for the format")
    return Recipe(name=name, path=path, description=str(data.get("description", "")), toolchain=toolchain,
                  target=target, env=env, mirrors=mirrors, components=components, smoke=smoke,
                  demo=bool(data.get("demo", False)), patches_dir=patches_dir, data=data, resolve=resolve)


def _target(t: Any, pr: _Problems) -> TargetSpec:
    if not isinstance(t, dict):
        return TargetSpec()
    pr.check_keys(t, TARGET_KEYS, "target.")
    runtime = t.get("runtime", "host")
    if isinstance(runtime, str) and runtime not in RUNTIMES:
        pr.add("target.runtime", f"unknown runtime {runtime!r}{did_you_mean(runtime, list(RUNTIMES))}; "
                                 f"use one of {', '.join(RUNTIMES)}")
    image, container = t.get("image", ""), t.get("container", "")
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
                      engine_args=pr.str_list(t, "engine-args", "target.engine-args"))


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


def _components(comps: Any, pr: _Problems, patches_dir: Path, pinned: bool = True) -> tuple[Component, ...]:
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
        patches = _patches(c.get("patches", []), pr, f"{where}.patches", patches_dir)
        command = pr.str_list(c, "command", f"{where}.command") if "command" in c else DEFAULT_COMMAND
        if c.get("command") == []:  # (a list with a non-string is reported by str_list, not as empty)
            pr.add(f"{where}.command", "must not be empty")
        for arg in command:
            for ph in re.findall(r"\{([^}]*)\}", arg):
                if ph not in PLACEHOLDERS:
                    pr.add(f"{where}.command", f"unknown placeholder {{{ph}}}{did_you_mean(ph, list(PLACEHOLDERS))}; "
                                               f"known: {', '.join('{'+p+'}' for p in PLACEHOLDERS)}")
        venv = c.get("version-env", "SETUPTOOLS_SCM_PRETEND_VERSION")
        if isinstance(venv, str) and not ENV_NAME.match(venv):
            pr.add(f"{where}.version-env", "not a valid environment variable name")
        fetch = _fetchcontent(c.get("fetchcontent", []), pr, where)
        built[name] = Component(
            name=name, url=url if isinstance(url, str) else "", commit=commit if isinstance(commit, str) else "",
            ref=c.get("ref", "") if isinstance(c.get("ref", ""), str) else "",
            subdir=subdir.strip("/") if isinstance(subdir, str) else "", patches=patches,
            after=pr.str_list(c, "after", f"{where}.after"),
            version=c.get("version", "") if isinstance(c.get("version", ""), str) else "",
            version_env=venv if isinstance(venv, str) else "SETUPTOOLS_SCM_PRETEND_VERSION",
            dist=c.get("dist", name) if isinstance(c.get("dist", name), str) else name,
            import_name=c.get("import", "") if isinstance(c.get("import", ""), str) else "",
            install_args=pr.str_list(c, "install-args", f"{where}.install-args") if "install-args" in c
            else DEFAULT_INSTALL_ARGS,
            command=command, env=pr.env_table(c.get("env", {}), f"{where}.env"), fetchcontent=fetch,
            built_against=_dist_names(pr, c, "built-against", f"{where}.built-against"))
    return _order(built, pr)


PATCH_KEYS = {"url": str, "commit": str, "path": str, "sha256": str}


def _patches(items: Any, pr: _Problems, where: str, patches_dir: Path) -> tuple[PatchSpec, ...]:
    if not isinstance(items, list):
        return ()
    out = []
    for i, p in enumerate(items):
        if isinstance(p, str):
            if not (patches_dir / p).is_file():
                pr.add(where, f"patch {p!r} not found in {patches_dir} (paths are relative to patches/)")
            out.append(PatchSpec(p))
        elif isinstance(p, dict):
            w = f"{where}[{i}]"
            pr.check_keys(p, PATCH_KEYS, f"{w}.")
            missing = [k for k in PATCH_KEYS if not isinstance(p.get(k), str) or not p.get(k)]
            if missing:
                pr.add(w, f"a patch from another repository needs url, commit, path and sha256; missing {', '.join(missing)}")
                continue
            if not HEX40.match(p["commit"]):
                pr.add(f"{w}.commit", f"must be a 40-hex commit id, got {p['commit']!r}")
            if not re.match(r"^[0-9a-f]{64}$", p["sha256"]):
                pr.add(f"{w}.sha256", "must be the 64-hex sha256 of the patch file")
            out.append(PatchSpec(p["path"], p["url"], p["commit"], p["sha256"]))
        else:
            pr.add(where, f"entries are file names under patches/ or tables {{url, commit, path, sha256}}, got {p!r}")
    return tuple(out)


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
        if all(isinstance(x, str) for x in (name, url, commit)):
            out.append(FetchContentDep(name, url, commit, env if isinstance(env, str) else ""))
    return tuple(out)


def _order(comps: dict[str, Component], pr: _Problems) -> tuple[Component, ...]:
    """Dependency order (`after`), stable in declaration order; unknown names and cycles are problems."""
    for c in comps.values():
        for dep in c.after:
            if dep not in comps:
                pr.add(f"components.{c.name}.after", f"unknown component {dep!r}{did_you_mean(dep, list(comps))}")
            elif dep == c.name:
                pr.add(f"components.{c.name}.after", "a component cannot come after itself")
    ordered: list[Component] = []
    placed: set[str] = set()
    pending = list(comps.values())
    while pending:
        ready = [c for c in pending if all(d in placed or d not in comps or d == c.name for d in c.after)]
        if not ready:
            names = ", ".join(c.name for c in pending)
            pr.add("components", f"`after` forms a cycle among: {names}")
            return tuple(ordered + pending)
        first = ready[0]
        ordered.append(first)
        placed.add(first.name)
        pending.remove(first)
    return tuple(ordered)


def _dist_names(pr: _Problems, table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    names = pr.str_list(table, key, where)
    for n in names:
        if not re.match(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$", n):
            pr.add(where, f"{n!r} is not a distribution name (e.g. \"torch\")")
    return names


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
        elif re.match(r"^[a-z+]+://[^/@]*:[^/@]*@", url):
            pr.add("resolve.indexes", "a URL with credentials would be recorded in the lock; "
                                      "put them in ~/.netrc or a keyring instead")
    links = []
    for link in pr.str_list(r, "find-links", "resolve.find-links"):
        if "://" in link or link.startswith("{demo}"):  # {demo}: the demo's shipped files (toolchain.resolve)
            links.append(link)
            continue
        links.append(str((path.parent / link).resolve()))  # checked when resolving: a lock's recipe loads anywhere
    version = r.get("python-version", "")
    if isinstance(version, str) and version and not re.match(r"^3\.\d+$", version):
        pr.add("resolve.python-version", f"must be MAJOR.MINOR such as \"3.12\", got {version!r}")
    return ResolveSpec(indexes=indexes, find_links=tuple(links),
                       index_strategy=strategy if isinstance(strategy, str) else ResolveSpec.index_strategy,
                       platform=r.get("platform", "") if isinstance(r.get("platform", ""), str) else "",
                       python_version=version if isinstance(version, str) else "")


def _smoke(s: Any, pr: _Problems) -> SmokeSpec:
    if not isinstance(s, dict):
        return SmokeSpec()
    pr.check_keys(s, SMOKE_KEYS, "smoke.")
    device = s.get("device", "b70")
    tp = s.get("tensor-parallel-size", 1)
    if isinstance(device, str) and device not in DEVICES:
        pr.add("smoke.device", f"unknown device {device!r}{did_you_mean(device, list(DEVICES))}; use b60 or b70")
    elif isinstance(tp, int) and isinstance(device, str) and tp not in DEVICES[device]:
        pr.add("smoke.tensor-parallel-size", f"{tp} is not supported on {device} "
                                              f"(allowed: {', '.join(map(str, DEVICES[device]))})")
    for key in ("port", "ready-timeout", "repeat", "max-model-len", "request-timeout"):
        if isinstance(s.get(key), int) and s[key] <= 0:
            pr.add(f"smoke.{key}", "must be a positive integer")
    return SmokeSpec(model=s.get("model", "") if isinstance(s.get("model", ""), str) else "",
                     device=device if isinstance(device, str) else "b70",
                     tensor_parallel_size=tp if isinstance(tp, int) else 1,
                     serve_args=pr.str_list(s, "serve-args", "smoke.serve-args"),
                     env=pr.env_table(s.get("env", {}), "smoke.env"),
                     cases=pr.str_list(s, "cases", "smoke.cases"), raw=dict(s))


def replace_component(recipe: Recipe, comp: Component) -> Recipe:
    return replace(recipe, components=tuple(comp if c.name == comp.name else c for c in recipe.components))
