"""What a recipe is, once loaded: frozen dataclasses, every relative path already resolved.

`recipe.load` finds and reads recipe files (with `extends`); `recipe.validate` turns a table into these.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolchain.core import toml as tomlio
from toolchain.core.checks import COMMIT, NAME, SHA256, STR
from toolchain.core.fs import sha256_bytes
from toolchain.core.names import did_you_mean
from toolchain.core.record import field, fields, record, replace
from toolchain.core.redact import redact_text
from toolchain.core.regex import HEX40, SHA256_HEX, URL_CREDENTIALS
from toolchain.core.serial import Check, meta
from toolchain.errors import RecipeError
from toolchain.recipe.buildspec import BuildSpec
from toolchain.recipe.cachespec import CacheSpec
from toolchain.recipe.keys import key, key_of

# what a prebuilt component (a released wheel, never compiled) may say besides `prebuilt`
# (`commit`/`ref`: the commit a per-commit wheel was built from, recorded in the lock; nothing is fetched)
PREBUILT_KEYS = ("prebuilt", "after", "dist", "import", "install-args", "commit", "ref", "drop")
DEFAULT_COMMAND = ("{python}", "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "{src}", "-w", "{out}")
DEFAULT_INSTALL_ARGS = ("--no-deps", "--force-reinstall")
DEFAULT_SETVARS = "/opt/intel/oneapi/setvars.sh"
DEFAULT_VERSION_ENV = "SETUPTOOLS_SCM_PRETEND_VERSION"  # the variable a build reads its version from (setuptools-scm)


@record
class Origin:
    """The recipe file that declared a key, and where the patches it names live. Relative paths in a key
    resolve against the recipe that declared it, not the one that extends it."""
    file: Path
    patches_dirs: tuple[Path, ...]  # one for a recipe file; a lock's recorded recipe may search several

    @property
    def dir(self) -> Path:
        """The directory of the declaring recipe file, which its relative paths resolve against."""
        return self.file.parent


@record
class Found:
    """Where a recipe named on the command line or by `extends` was found: its file, and how ("a path",
    "beside child.toml/", "--recipes-dir", "$TOOLCHAIN_RECIPES_DIR", "./recipes", "the shipped recipes")."""
    name: str
    file: Path
    where: str


@record
class Swap:
    """An inherited component an extending recipe swapped: for a released wheel (`prebuilt` written over a
    component built from source) or back to a build from source (`url` written over an inherited prebuilt).
    The inherited keys in `dropped` went; `after`, `dist` and `import` stayed (`recipe.load.SWAP_KEEPS`). A swap
    back restores the keys the nearest swap for a prebuilt removed (`restored`, as they were before `restored_from`
    swapped them out), but url, commit and ref, which the swapping recipe gives anew."""
    component: str
    to: str        # "prebuilt" | "source"
    file: Path     # the recipe file that swapped it
    dropped: tuple[str, ...]
    restored: tuple[str, ...] = ()
    restored_from: str = field(default="", metadata=meta(omit_default=True))  # the file that swapped them out
    # a swap for a prebuilt: the component's table and its keys' origins as they were (what a swap back restores)
    removed: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False, metadata=meta(skip=True))
    removed_origins: Mapping[str, Origin] = field(default_factory=dict, compare=False, repr=False,
                                                  metadata=meta(skip=True))


APPLIED_AT: Check = ("root or subdir", lambda v: v in ("root", "subdir"))


@record
class Patch:
    """One patch, identified by its sha256 (part of the cache key of every build that applies it).

    Local: `path` relative to the patches/ directory of the recipe that names it; `file` is that file.
    Remote: `path` inside repository `url` at `commit`, pinned by `sha256` (an integrator's patch, such as
    intel/llm-scaler's vLLM patch, used without copying it here). A lock records `label` and `sha256` (and
    `url`/`commit` of a remote patch) and reads back into this type, with `file` unset; `file` does not take
    part in equality.

    Each field is the one declaration of its key: in a recipe's pinned patch table (`key`), and in a lock's
    `patches` (`meta`: field order is the lock's key order, so `url` and `commit` are keyword-only)."""
    path: str = field(metadata={**key(str), **meta(check=NAME)})
    url: str = field(default="", kw_only=True, metadata={**key(str), **meta(check=STR, omit_default=True)})
    commit: str = field(default="", kw_only=True, metadata={**key(str), **meta(check=COMMIT, omit_default=True)})
    sha256: str = field(metadata={**key(str), **meta(check=SHA256)})
    file: Path | None = field(default=None, compare=False, metadata=meta(skip=True))
    # for a component built from a subdir: "root" when the patch's paths start at the repository root,
    # "subdir" when inside the subdir (sources.patches.applies_at); recorded in the lock, not its identity
    applied: str = field(default="", compare=False, metadata=meta(key="applied-at", check=APPLIED_AT,
                                                                  omit_default=True))

    @property
    def remote(self) -> bool:
        """Whether the patch comes from another repository (pinned by url and commit)."""
        return bool(self.url)

    @property
    def label(self) -> str:
        """How a lock and messages name the patch: its path, or url@commit:path for a remote one."""
        return f"{self.url}@{self.commit[:12]}:{self.path}" if self.url else self.path


@record
class InputFile:
    """A file a build reads from outside its source tree (a kernel configuration preset such as the one
    VLLM_CHUNK_PREFILL_CONFIG names): identified by its sha256, which is part of the cache key. `label`: the
    path as the recipe wrote it (`inputs`), or `env NAME` for an env value naming a file; `file`: where it is."""
    label: str = field(metadata=meta(key="path", check=NAME))
    sha256: str = field(metadata=meta(check=SHA256))
    file: Path | None = field(default=None, compare=False, metadata=meta(skip=True))


@record
class Recorded:
    """What a lock records of the local files its recipe names: the sha256 of each patch and input file by
    (component, label), and the cache that keeps copies by sha256 (`core.blobs`). A recipe read back from a
    lock takes a file from the cache by its hash when nothing is left at the recorded place (the folder
    moved); a file still there is what the recipe names (a changed one is refused by its hash). Before the
    cache, `search`: folders where a file of that hash may be under its recorded name (a bundle's folder, its
    patches/ and inputs/<component>/, each --patches-dir), whatever the current folder."""
    sha256: Mapping[tuple[str, str], str]
    cache_dir: Path | None = None
    search: tuple[Path, ...] = ()


@record
class FetchContentDep:
    """A CMake FetchContent dependency pre-fetched at a pinned commit and handed to CMake. Its fields declare
    its recipe keys (`key`) and its lock table (`meta`: name, url with credentials masked, commit)."""
    name: str = field(metadata={**key(str), **meta(check=NAME)})
    url: str = field(metadata={**key(str), **meta(check=NAME, dump=redact_text)})
    commit: str = field(metadata={**key(str), **meta(check=COMMIT)})
    # pass the checkout path in this env var instead of -DFETCHCONTENT_SOURCE_DIR_<NAME> (not in a lock)
    env: str = field(default="", metadata={**key(str), **meta(skip=True)})

    @property
    def cmake_var(self) -> str:
        """The CMake variable pointing FetchContent at the pre-fetched checkout."""
        return "FETCHCONTENT_SOURCE_DIR_" + self.name.upper()


@record
class Prebuilt:
    """A component that is never compiled: a released wheel. `requirement` ("vllm-xpu-kernels==0.1.16.2")
    is looked up in the recipe's [resolve] indexes and find-links; `url` + `sha256` name one file."""
    requirement: str = ""
    url: str = ""
    sha256: str = ""

    @property
    def label(self) -> str:
        """How messages name the released wheel: its requirement, else its URL."""
        return self.requirement or self.url


@record
class Component:
    """One component of a recipe: its source, pin, patches, build command and environment."""

    name: str
    url: str = field(metadata=key(str))
    commit: str = field(metadata=key(str))
    ref: str = field(default="", metadata=key(str))
    subdir: str = field(default="", metadata=key(str))
    patches: tuple[Patch, ...] = field(default=(), metadata=key(list))
    after: tuple[str, ...] = field(default=(), metadata=key(list))
    version: str = field(default="", metadata=key(str))
    version_env: str = field(default=DEFAULT_VERSION_ENV, metadata=key(str))
    dist: str = field(default="", metadata=key(str))
    import_name: str = field(default="", metadata=key(str, "import"))
    install_args: tuple[str, ...] = field(default=DEFAULT_INSTALL_ARGS, metadata=key(list))
    command: tuple[str, ...] = field(default=DEFAULT_COMMAND, metadata=key(list))
    env: tuple[tuple[str, str], ...] = field(default=(), metadata=key(dict))
    fetchcontent: tuple[FetchContentDep, ...] = field(default=(), metadata=key(list))
    # FetchContent names the sources declare but the recipe does not pin, each with its reason: never fetched by
    # this configuration (offline stays on), or fetched by CMake itself (needs the network or a mirror rewrite)
    fetchcontent_unused: tuple[tuple[str, str], ...] = field(default=(), metadata=key(dict))
    fetchcontent_network: tuple[tuple[str, str], ...] = field(default=(), metadata=key(dict))
    built_against: tuple[str, ...] = field(default=(), metadata=key(list))  # distributions whose C++ ABI the compiled wheel depends on (torch)
    jobs: int = field(default=0, metadata=key(int))             # pinned compile jobs (0: sized by memory; recipe/buildspec.py)
    memory_per_job: int = field(default=0, metadata=key(str))   # bytes one compile job needs (0: the tool's default for it)
    prebuilt: Prebuilt | None = field(default=None, metadata=key(object))  # a released wheel, never compiled (url and commit are then empty)
    prebuilt_index: str = field(default="", metadata=key(str))  # per-commit wheels (+g<hex> local versions) a bisect step takes before compiling
    inputs: tuple[InputFile, ...] = field(default=(), metadata=key(list))  # files the build reads beyond its tree (`inputs = [...]`)


DEFAULT_INDEX = "https://pypi.org/simple"
INDEX_STRATEGIES = ("first-index", "unsafe-first-match", "unsafe-best-match")


@record
class ResolveSpec:
    """`[resolve]`: where the runtime closure of the built wheels is resolved from (toolchain.resolve).
    No index and no find-links: nothing is resolved from anywhere (a closure with requirements fails)."""
    indexes: tuple[str, ...] = field(default=(DEFAULT_INDEX,), metadata=key(list))   # the first is the primary index, the rest extra indexes
    find_links: tuple[str, ...] = field(default=(), metadata=key(list))              # directories (relative to the recipe file) or URLs
    index_strategy: str = field(default="first-index", metadata=key(str))           # uv's --index-strategy
    platform: str = field(default="", metadata=key(str))                            # uv's --python-platform; default: from the probed target
    python_version: str = field(default="", metadata=key(str))                      # default: the probed target's major.minor


@record
class NativeSpec:
    """`[native]`: additions to the shipped native policy (toolchain/data/native-policy.toml). `host_provides`:
    sonames (fnmatch patterns) the run host provides, recorded in the lock and checked where the stack runs;
    `ignore`: sonames the audit skips (recorded in the lock's recipe text)."""
    host_provides: tuple[str, ...] = field(default=(), metadata=key(list))
    ignore: tuple[str, ...] = field(default=(), metadata=key(list))


@record
class ToolchainSpec:
    """A recipe's [toolchain] table: the setvars script sourced before builds."""

    setvars: str = field(default=DEFAULT_SETVARS, metadata=key(str))
    setvars_args: tuple[str, ...] = field(default=("--force",), metadata=key(list))
    base_dir: Path = field(default=Path("."), compare=False)  # a relative `setvars` is relative to this

    @property
    def enabled(self) -> bool:
        """Whether a setvars script is sourced before builds (an empty `setvars` turns it off)."""
        return bool(self.setvars)


@record
class TargetSpec:
    """A recipe's [target] table: where builds and smokes run."""

    runtime: str = field(default="host", metadata=key(str))
    python: str = field(default="python3", metadata=key(str))
    image: str = field(default="", metadata=key(str))
    container: str = field(default="", metadata=key(str))
    run_args: tuple[str, ...] = field(default=(), metadata=key(list))
    engine_args: tuple[str, ...] = field(default=(), metadata=key(list))
    base: str = field(default="", metadata=key(str))  # an image pinned by digest whose environment the components are rebuilt into (`image` = it)


@record
class SuiteSpec:
    """`[smoke.suite]`: upstream's own tests run against the lock's installed wheels, with no server
    (smoke/suite.py): the folder `dir` of `component`'s repository at its locked commit, the test files
    `tests` in it (all of it when empty) and extra pytest `args`; a test that failed is run again up to `reruns`
    times, and one that then passes is reported flaky, never passed."""
    component: str = field(default="", metadata=key(str))
    dir: str = field(default="", metadata=key(str))
    tests: tuple[str, ...] = field(default=(), metadata=key(list))
    args: tuple[str, ...] = field(default=(), metadata=key(list))
    reruns: int = field(default=0, metadata=key(int))


@record
class SmokeSpec:
    """A recipe's `[smoke]` table, typed (recipe.validate checks it; smoke reads these fields). The lock keeps
    the table as written (`raw`, redacted) and smoke types it again with the same `validate.smoke_spec`."""
    model: str = field(default="", metadata=key(str))
    served_model_name: str = field(default="", metadata=key(str))
    device: str = field(default="", metadata=key(str))                  # "": no device requested (no device check, no profile environment)
    tensor_parallel_size: int = field(default=0, metadata=key(int))     # 0: not given (1, and not passed to the server)
    port: int = field(default=0, metadata=key(int))                     # 0: not given
    max_model_len: int = field(default=0, metadata=key(int))
    serve_cmd: tuple[str, ...] = field(default=(), metadata=key(list))   # (): the default serve command
    serve_args: tuple[str, ...] = field(default=(), metadata=key(list))
    env: tuple[tuple[str, str], ...] = field(default=(), metadata=key(dict))
    cases: tuple[str, ...] = field(default=(), metadata=key(list))
    custom_cases: tuple[Mapping[str, Any], ...] = field(default=(), metadata=key(list))  # tables with a name (smoke.cases checks their params)
    repeat: int = field(default=0, metadata=key(int))
    ladder: tuple[Mapping[str, Any], ...] | None = field(default=None, metadata=key(list))  # None: the default steps
    ready_timeout: float = field(default=0.0, metadata=key(int))
    request_timeout: float = field(default=0.0, metadata=key(int))
    suite: SuiteSpec | None = field(default=None, metadata=key(dict))  # upstream's tests instead of a server
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@record
class Recipe:
    """A loaded, validated recipe (after `extends`)."""

    name: str
    path: Path
    description: str = field(metadata=key(str))
    toolchain: ToolchainSpec = field(metadata=key(dict))
    target: TargetSpec = field(metadata=key(dict))
    env: tuple[tuple[str, str], ...] = field(metadata=key(dict))
    mirrors: tuple[tuple[str, str], ...] = field(metadata=key(dict))
    components: tuple[Component, ...] = field(metadata=key(dict))  # in dependency (build and install) order
    smoke: SmokeSpec = field(metadata=key(dict))
    demo: bool = field(metadata=key(bool))
    patches_dirs: tuple[Path, ...]  # where this recipe's own patches are looked up (one for a recipe file)
    data: dict[str, Any] = field(compare=False, hash=False, default_factory=dict)  # resolved table
    # keys declared by another recipe file (an `extends` parent): "toolchain.setvars", "mirrors.PREFIX",
    # "components.NAME.patches"; every other key is this recipe's own (`own_origin`)
    origins: tuple[tuple[str, Origin], ...] = field(default=(), compare=False, hash=False)
    resolve: ResolveSpec = field(default=ResolveSpec(), metadata=key(dict))  # [resolve]: the runtime closure (toolchain.resolve)
    cache: CacheSpec = field(default=CacheSpec(), metadata=key(dict))  # [cache]: the remote wheel cache (recipe/cachespec.py)
    build: BuildSpec = field(default=BuildSpec(), metadata=key(dict))  # [build]: compiler cache, jobs, memory per job (recipe/buildspec.py)
    native: NativeSpec = field(default=NativeSpec(), metadata=key(dict))  # [native]: additions to the native audit's policy (resolve/policy.py)
    # [image] base = "name@sha256:...": the base `toolchain image` installs a lock without [target] base over
    image_base: str = field(default="", metadata=key(dict, "image"))
    # where each recipe file of the `extends` chain was found (this recipe's first); () for a lock's recipe
    found: tuple[Found, ...] = field(default=(), compare=False, hash=False)
    # a partial build (`build --component`): the components it builds, the others left out of `data`
    partial: tuple[str, ...] = ()
    # inherited components an extending recipe swapped (for a prebuilt, or back to source); () for a lock's
    swaps: tuple[Swap, ...] = field(default=(), compare=False, hash=False)

    @functools.cached_property
    def text(self) -> str:
        """The resolved recipe (extends applied) as TOML: what a lock records and rebuilds from."""
        return tomlio.dumps(self._resolved())

    @functools.cached_property
    def sha256(self) -> str:
        """sha256 of `text`, the resolved recipe a lock records."""
        return sha256_bytes(self.text.encode())

    def remember_text(self, memo_dir: Path | None) -> None:
        """Compute `text` through the memo under `memo_dir` (the same resolved recipe gives the same TOML
        while the writer is unchanged): a warm build does not load the TOML writer."""
        if memo_dir is not None and "text" not in self.__dict__:
            self.__dict__["text"] = tomlio.dumps_remembered(self._resolved(), memo_dir)  # cached_property's slot

    def _resolved(self) -> dict[str, Any]:
        return {k: v for k, v in self.data.items() if k != "extends"}

    @property
    def own_origin(self) -> Origin:
        """This recipe file as the origin of the keys it declares itself."""
        return Origin(self.path, self.patches_dirs)

    def origin(self, key: str) -> Origin:
        """The recipe file that declared `key` (a dotted key as in `origins`)."""
        return dict(self.origins).get(key, self.own_origin)

    @property
    def all_patches_dirs(self) -> tuple[Path, ...]:
        """Every patches/ directory the recipe's patches come from: its own (`patches_dirs`) first, then those of
        the recipes it extends."""
        dirs = [*self.own_origin.patches_dirs, *(d for _, o in self.origins for d in o.patches_dirs)]
        return tuple(dict.fromkeys(dirs))

    # ---- typed edits: a derived recipe, as the recipe check would read its table, checked where it changes --
    # (each edit makes the new Component; `_with` writes the table from it)

    def with_commit(self, component: str, commit: str, ref: str | None = None) -> Recipe:
        """This recipe with `component` pinned at `commit` (and `ref`, when given): what bisect builds at a step.
        Only the new commit is checked (a full 40-hex id); nothing else is validated again."""
        comp = self.component(component)
        if not HEX40.match(commit):
            raise RecipeError(f"{self.path.name}: components.{component}.commit: {commit!r} is not a full 40-hex "
                              f"commit id", hint="pass the commit as git names it (git rev-parse)")
        return self._with(replace(comp, commit=commit, ref=ref or comp.ref))

    def with_prebuilt_wheel(self, component: str, url: str, sha256: str) -> Recipe:
        """This recipe with `component` taken as the released wheel at `url` (sha256 `sha256`) instead of
        built: a prebuilt `{url, sha256}`, keeping what a prebuilt component may say (`PREBUILT_KEYS`: its commit,
        dist, install-args, ...). The URL and sha256 are checked as the recipe check does."""
        comp = self.component(component)
        where = f"{self.path.name}: components.{component}.prebuilt"
        if not url.endswith(".whl") or URL_CREDENTIALS.match(url):
            raise RecipeError(f"{where}.url: {url!r} is not the URL of one wheel file without credentials",
                              hint="an index's wheel URL carries no password: put credentials in ~/.netrc")
        if not SHA256_HEX.match(sha256):
            raise RecipeError(f"{where}.sha256: {sha256!r} is not a 64-hex sha256")
        return self._with(Component(name=comp.name, url="", commit=comp.commit, ref=comp.ref, after=comp.after,
                                    dist=comp.dist or comp.name, import_name=comp.import_name,
                                    install_args=comp.install_args, command=(),
                                    prebuilt=Prebuilt(url=url, sha256=sha256)))

    def with_only(self, component: str) -> Recipe:
        """This recipe with `component` as its only component (its `after` dropped: nothing else is built)."""
        return self._with(replace(self.component(component), after=()), only=True)

    def _table(self, component: str) -> dict[str, Any]:
        tables = self.data.get("components")
        table = tables.get(component) if isinstance(tables, dict) else None
        return dict(table) if isinstance(table, dict) else {}

    def _with(self, comp: Component, *, only: bool = False) -> Recipe:
        """A copy with `comp` in place of its namesake (alone, with `only`). The component is the one fact an edit
        changes: its resolved table (what the lock records) follows from it (`edited_table`)."""
        tables = {} if only else dict(self.data.get("components") or {})
        tables[comp.name] = edited_table(self._table(comp.name), self.component(comp.name), comp)
        components = (comp,) if only else tuple(comp if c.name == comp.name else c for c in self.components)
        return replace(self, components=components, data={**self.data, "components": tables})

    def component(self, name: str) -> Component:
        """The component `name`; a RecipeError listing the components when there is none."""
        for c in self.components:
            if c.name == name:
                return c
        raise RecipeError(f"{self.path}: no component {name!r}" + did_you_mean(name, [c.name for c in self.components]),
                          hint=f"components of {self.name}: {', '.join(c.name for c in self.components)}")


def edited_table(table: Mapping[str, Any], before: Component, after: Component) -> dict[str, Any]:
    """A component's resolved table after a typed edit from `before` to `after`, as the recipe check reads it
    back into `after`: each key whose field changed is written from `after` under the key the model declares
    (`recipe.keys`), or removed where the field went back to its default; every other key stays as written, in
    its place. A prebuilt component's table keeps only what a prebuilt may say (`PREBUILT_KEYS`)."""
    out = dict(table)
    for f in fields(Component):
        name = key_of(f)
        old, new = getattr(before, f.name), getattr(after, f.name)
        if name is None or old == new:
            continue
        if new == f.default:
            out.pop(name, None)
        else:
            out[name] = _as_toml(new, name)
    return {k: v for k, v in out.items() if k in PREBUILT_KEYS} if after.prebuilt is not None else out


def _as_toml(value: object, name: str) -> object:
    """A field's value as its recipe key writes it (the values typed edits write)."""
    if isinstance(value, Prebuilt):
        return {"url": value.url, "sha256": value.sha256} if value.url else value.requirement
    if isinstance(value, str | int | float):
        return value
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
        return list(value)
    raise TypeError(f"{name}: a typed edit writes no {type(value).__name__} into a recipe table")
