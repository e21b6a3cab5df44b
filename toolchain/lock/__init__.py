"""The lock: `<out>/stack.lock.toml` (what was built, exactly) and `<out>/pylock.toml` (PEP 751).

A lock is read back into a frozen `Lock`; every recorded hash is checked before a lock is trusted.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain import __version__
from toolchain.build.built_against import BuiltAgainst
from toolchain.build.cache import WHEELS_DIR, WheelRef
from toolchain.build.ccache import CacheReport
from toolchain.build.metrics import BuildMetrics
from toolchain.core import toml as tomlio
from toolchain.core.checks import ARGV, COMMIT, ENV, HEX, NAME, SECONDS, SHA256, STR, STRS, TABLE, TABLES
from toolchain.core.fs import atomic_write_text, sha256_bytes, sha256_file
from toolchain.core.record import field, record, replace
from toolchain.core.redact import redact_argv, redact_data, redact_env, redact_text
from toolchain.core.regex import Regex
from toolchain.core.serial import Check, Data, from_data, meta, rounded, schema, to_data, to_table
from toolchain.errors import RecipeError, TestFailed
from toolchain.lock.buildrecord import RECORD_HEADER, read_record, record_bytes, record_dict, with_record
from toolchain.lock.buildrecord import RECORD_NAME as RECORD_NAME
from toolchain.recipe.model import FetchContentDep, InputFile, Patch
from toolchain.resolve.closure import Closure, LockedDist, canonical_name, pylock_entry
from toolchain.resolve.native import WheelAudit
from toolchain.sources.mirrors import DESCRIBE_RULE
from toolchain.target.facts import TargetInfo, ToolchainInfo

if TYPE_CHECKING:
    from toolchain.build.plan import Plan
    from toolchain.build.stack import BuiltComponent
    from toolchain.target.baseenv import BaseEnv  # (read only for a lock that records one: 2 dataclasses)

LOCK_NAME = "stack.lock.toml"
PYLOCK_NAME = "pylock.toml"
LOCK_VERSION = 1



def _sorted_env(env: dict[str, str]) -> Data:
    return dict(sorted(env.items()))


def _origins_load(table: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(dict(table).items()))


def _origins_dump(origins: tuple[tuple[str, str], ...]) -> Data:
    return dict(origins)


def checkout_relative(recipe_file: str) -> str:
    """A recipe file without where its project was checked out, as a lock names it: `recipes/<name>.toml` (or
    `<name>.toml`); a shipped one (`{shipped}/...`) is found again wherever the tool is installed and stays as
    it is. The build record keeps the absolute path."""
    from toolchain.recipe.load import SHIPPED_PLACE, place

    path = Path(recipe_file)
    if not path.is_absolute():
        return recipe_file
    if (placed := place(path)).startswith(SHIPPED_PLACE + "/"):
        return placed
    return path.relative_to(path.parent.parent if path.parent.name == "recipes" else path.parent).as_posix()


def _origins_portable(origins: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((k, checkout_relative(v)) for k, v in origins)


def _audits_dump(audits: tuple[WheelAudit, ...]) -> Data:
    return to_data(audits)  # (its own key style: written before the lock's went through core/serial)


def _audits_load(tables: list[dict[str, Any]]) -> tuple[WheelAudit, ...]:
    return tuple(from_data(WheelAudit, a) for a in tables)


def _components_load(tables: list[dict[str, Any]]) -> tuple[LockedComponent, ...]:
    return tuple(from_data(LockedComponent, c, kebab=True, unknown_ok=True) for c in tables)


def _base_env(table: dict[str, Any]) -> BaseEnv:
    from toolchain.target.baseenv import BaseEnv

    return from_data(BaseEnv, table, kebab=True)


# Each field below is the one declaration of its key in stack.lock.toml (kebab-case; `meta(key=)` where it
# differs), how it is written and read back, and what a well-formed lock holds there (`check`; required when
# it has neither a default nor `absent`). Field order is the lock's key order.

@record
class LockedComponent:
    """A component as its lock records it."""

    name: str = field(metadata=meta(check=NAME))
    url: str = field(metadata=meta(check=NAME))
    ref: str = field(metadata=meta(check=STR, absent=""))
    commit: str = field(metadata=meta(check=COMMIT))
    describe: str = field(metadata=meta(check=STR, absent=""))
    subdir: str = field(metadata=meta(check=STR, absent=""))
    after: tuple[str, ...] = field(metadata=meta(check=STRS, absent=()))
    dist: str = field(metadata=meta(check=STR, absent=""))
    import_name: str = field(metadata=meta(key="import", check=STR, absent=""))
    version: str = field(metadata=meta(check=STR, absent=""))
    install_args: tuple[str, ...] = field(metadata=meta(check=STRS, absent=()))
    patches: tuple[Patch, ...] = field(metadata=meta(check=TABLES, absent=()))  # each as `Patch` declares it
    env: dict[str, str] = field(metadata=meta(check=ENV, absent={}, dump=_sorted_env))
    command: tuple[str, ...] = field(metadata=meta(check=ARGV))
    cache_key: str = field(metadata=meta(check=HEX))
    build_seconds: float = field(metadata=meta(check=SECONDS, absent=0.0, dump=rounded(3), record=True))
    wheel: WheelRef = field(metadata=meta(check=TABLE))
    # a prebuilt component (never compiled): a `PrebuiltFile`'s table; url and commit are then ""
    prebuilt: dict[str, Any] = field(default_factory=dict, metadata=meta(check=TABLE, omit_default=True, load=dict))
    # each a `FetchContentDep`'s table (name, url, commit)
    fetchcontent: tuple[dict[str, str], ...] = field(default=(), metadata=meta(check=TABLES, omit_default=True))
    # e.g. torch 2.14.0+xpu, C++11 ABI 1 (toolchain.build.built_against)
    built_against: tuple[BuiltAgainst, ...] = field(default=(), metadata=meta(omit_default=True))
    # files read beyond the tree (kernel configuration): label, sha256
    inputs: tuple[InputFile, ...] = field(default=(), metadata=meta(check=TABLES, omit_default=True))
    # what the build that made the wheel cost (what that run measured, not what it made): the build record's
    jobs: int = field(default=0, metadata=meta(omit_default=True, record=True))
    jobs_source: str = field(default="", metadata=meta(omit_default=True, record=True))
    compiler_cache: CacheReport = field(default=CacheReport(), metadata=meta(omit_default=True, record=True))
    metrics: BuildMetrics = field(default=BuildMetrics(), metadata=meta(omit_default=True, record=True))


@record
class Lock:
    """A lock read back (`read_lock`) or assembled from a build (`assemble_lock`)."""

    recipe_name: str = field(metadata=meta(key="recipe.name", check=NAME))
    recipe_path: str = field(metadata=meta(key="recipe.path", check=STR, absent="",
                                           portable=lambda v, _: checkout_relative(v)))
    recipe_sha256: str = field(metadata=meta(key="recipe.sha256", check=SHA256))
    recipe_text: str = field(metadata=meta(key="recipe.text", check=STR, absent=""))
    toolchain: ToolchainInfo = field(metadata=meta(absent=ToolchainInfo()))  # (checked by _info_problems)
    target: TargetInfo = field(metadata=meta(absent=TargetInfo()))
    smoke: dict[str, Any] = field(metadata=meta(check=TABLE, absent={}, load=dict))
    components: tuple[LockedComponent, ...] = field(metadata=meta(load=_components_load))
    tool_version: str = field(default=__version__, metadata=meta(check=STR, absent=""))
    normalizations: tuple[str, ...] = field(default=(), metadata=meta(check=STRS))
    # how `describe` (and the versions the builds derived) were computed
    describe_rule: str = field(default=DESCRIBE_RULE, metadata=meta(absent=""))
    path: Path | None = field(default=None, compare=False, metadata=meta(skip=True))
    # the resolved runtime dependencies ([resolve] and [[dependencies]], by hand); None: not resolved (--no-resolve)
    closure: Closure | None = field(default=None, metadata=meta(skip=True))
    # what the base image held ([target] base): the components are installed over it
    base: BaseEnv | None = field(default=None, metadata=meta(omit_default=True, load=_base_env))
    # each path-bearing key of the recipe text and the recipe file that declared it (recipe.load.place):
    # a rebuild from the lock resolves an inherited relative path (setvars, patches) against that file
    recipe_origins: tuple[tuple[str, str], ...] = field(default=(), metadata=meta(
        key="recipe.origins", check=ENV, omit_default=True, dump=_origins_dump, load=_origins_load,
        portable=lambda v, _: _origins_portable(v)))
    # a partial build (`build --component NAME`): the components it built; the recipe text holds only them
    recipe_partial: tuple[str, ...] = field(default=(), metadata=meta(key="recipe.partial", check=STRS,
                                                                        omit_default=True))
    # per wheel: its shared objects' DT_NEEDED and compiler stamps
    native: tuple[WheelAudit, ...] = field(default=(), metadata=meta(omit_default=True, dump=_audits_dump,
                                                                      load=_audits_load))
    # the box it was built on (target.hostfacts): the build record's
    host: dict[str, Any] = field(default_factory=dict, metadata=meta(omit_default=True, load=dict, record=True))

    @property
    def wheels_dir(self) -> Path:
        if self.path is None:
            raise ValueError("lock has no path")
        return self.path.parent / WHEELS_DIR

    def wheel_path(self, comp: LockedComponent) -> Path:
        return self.wheels_dir / comp.wheel.file

    def component(self, name: str) -> LockedComponent:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)


def to_dict(lock: Lock) -> dict[str, Any]:
    """The lock as TOML data: its declared fields (above) but what the build record keeps (`record`, and the
    `portable` form of this machine's paths), `lock-version` first and the closure's `[resolve]` and
    `[[dependencies]]` after the components."""
    out: dict[str, Any] = {"lock-version": LOCK_VERSION}
    for key, value in to_table(lock, kebab=True, part="lock").items():
        out[key] = value
        if key == "components" and lock.closure is not None:
            out["resolve"] = to_table(lock.closure, kebab=True, part="lock")
            out["dependencies"] = to_data(lock.closure.dists, kebab=True, part="lock")
    return out


def fetchcontent_table(dep: FetchContentDep) -> dict[str, str]:
    """A FetchContent dependency as a lock records it: the table `FetchContentDep` declares (credentials masked)."""
    return {k: str(v) for k, v in to_table(dep).items()}


LOCK_HEADER = "# Written by toolchain; do not edit (hashes are verified).\n"


def write_lock(lock: Lock, out_dir: Path, *, bundled_deps: bool = False, memo_dir: Path | None = None,
               record: bool = True) -> Path:
    """Write `stack.lock.toml`, its PEP 751 `pylock.toml` and (`record`) its build record `build-record.toml`
    into `out_dir`, each atomically; returns the lock's path (`memo_dir`: the text's sha256 remembered there, for
    the next build's check of it, `lock_file_says`). Without `record` (a bundle), no record is left there."""
    path = Path(out_dir) / LOCK_NAME
    out_dir = path.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    text = lock_text(lock)
    atomic_write_text(path, text)
    if memo_dir is not None:
        _text_sha256(to_dict(lock), memo_dir, text)
    atomic_write_text(out_dir / PYLOCK_NAME, pylock_text(lock, bundled_deps=bundled_deps))
    if record:
        kept = record_dict(lock, sha256_bytes(text.encode("utf-8")))
        record_text = RECORD_HEADER + tomlio.dumps(kept)
        atomic_write_text(out_dir / RECORD_NAME, record_text)
        if memo_dir is not None:
            _text_sha256(kept, memo_dir, record_text, header=RECORD_HEADER)
    else:
        (out_dir / RECORD_NAME).unlink(missing_ok=True)
    return path


def lock_text(lock: Lock) -> str:
    """`stack.lock.toml`'s text, exactly as `write_lock` writes it."""
    return LOCK_HEADER + tomlio.dumps(to_dict(lock))


def lock_file_says(path: Path, lock: Lock, memo_dir: Path | None = None) -> bool:
    """Whether the file at `path` holds exactly the text `write_lock` writes for `lock` (a regular file, read
    without following a link or blocking on a FIFO): a lock edited in --out, whatever its mtime says, is not.
    With `memo_dir`, the text's sha256 is remembered there by the data it writes (a warm build imports no TOML
    writer)."""
    from toolchain.core.fs import read_regular

    if memo_dir is not None:
        return _said_digest(path, lock, memo_dir) is not None
    try:
        return read_regular(path) == lock_text(lock).encode("utf-8")
    except OSError:
        return False


def _said_digest(path: Path, lock: Lock, memo_dir: Path) -> str | None:
    """The sha256 of the file at `path` when it is exactly the text `write_lock` writes for `lock`, else None."""
    from toolchain.core.fs import read_regular

    try:
        digest = sha256_bytes(read_regular(path))
    except OSError:
        return None
    return digest if digest == _text_sha256(to_dict(lock), memo_dir) else None


def out_files_say(path: Path, lock: Lock, memo_dir: Path) -> bool:
    """Whether the lock at `path` and the build record beside it hold exactly the texts `write_lock` writes for
    `lock` (the lock a regular file, read without following a link or blocking on a FIFO; the record only as
    `record_bytes` allows): then reading them back gives `lock`, and a warm no-op neither parses nor checks nor
    writes them. Compared by digests remembered under `memo_dir` by the data written (`_text_sha256`)."""
    digest = _said_digest(path, lock, memo_dir)
    if digest is None:
        return False
    raw = record_bytes(path)
    return raw is not None and sha256_bytes(raw) == _text_sha256(record_dict(lock, digest), memo_dir,
                                                                 header=RECORD_HEADER)


def _text_sha256(data: dict[str, Any], memo_dir: Path, text: str | None = None, *,
                 header: str = LOCK_HEADER) -> str:
    """The sha256 of the text `data` is written as after `header` (a lock's; the build record's with
    RECORD_HEADER), remembered by `repr(data)` while the writer (tomli-w, core/toml.py, this module) is the same
    file (`text`: the one just written)."""
    import importlib.util

    from toolchain.core.probe_memo import remembered

    spec = importlib.util.find_spec("tomli_w")
    writer = [spec.origin, tomlio.__file__, __file__] if spec and spec.origin else None
    kind = "lock-text" if header == LOCK_HEADER else "record-text"
    identity = {"data": sha256_bytes(repr(data).encode())}

    def compute() -> tuple[str, list[str] | None]:
        made = text if text is not None else header + tomlio.dumps(data)
        return sha256_bytes(made.encode("utf-8")), writer

    if text is not None:  # (just written: remember it, whatever an earlier record said)
        from toolchain.core.probe_memo import forget

        forget(memo_dir, kind, identity)
    return remembered(memo_dir, kind, identity, compute)


def pylock_text(lock: Lock, *, bundled_deps: bool = False) -> str:
    """PEP 751: the built wheels by relative path with sha256, in install order, then the resolved dependencies
    (by URL, or by `deps/` path in a bundle made --with-deps), each file with its sha256."""
    target = lock.target
    packages = []
    deps = lock.closure.dists if lock.closure is not None else ()
    for c in lock.components:
        name, version = wheel_name_version(c.wheel.file)
        entry: dict[str, Any] = {
            "name": name, "version": version,
            "wheels": [{"name": c.wheel.file, "path": f"{WHEELS_DIR}/{c.wheel.file}", "size": c.wheel.size,
                        "hashes": {"sha256": c.wheel.sha256}}],
        }
        if lock.closure is not None:
            entry["dependencies"] = [{"name": d.name, "version": d.version} for d in deps if name in d.required_by]
            entry["tool"] = {"toolchain": {"role": "built", "component": c.name}}
        packages.append(entry)
    packages += [pylock_entry(d, bundled=bundled_deps) for d in deps]
    data: dict[str, Any] = {"lock-version": "1.0", "created-by": "toolchain"}
    if target.python_version:
        major_minor = ".".join(target.python_version.split(".")[:2])
        data["requires-python"] = f"=={major_minor}.*"
    data["packages"] = packages
    text = tomlio.dumps(data)
    return "# PEP 751 lock of the wheels built by toolchain (install order).\n" + text


# A PEP 440 version already in its normalized form (release numbers without leading zeros, then aN, bN or rcN,
# .postN, .devN, and a +local of lower-case letters and digits, a number without leading zeros): it is its own
# normalization, so writing the pylock of such wheels imports no `packaging.version` (3 ms).
_NORMALIZED_VERSION = Regex(r"(?:0|[1-9]\d*)(?:\.(?:0|[1-9]\d*))*(?:(?:a|b|rc)(?:0|[1-9]\d*))?"
                                 r"(?:\.post(?:0|[1-9]\d*))?(?:\.dev(?:0|[1-9]\d*))?"
                                 r"(?:\+(?:[a-z0-9]*[a-z][a-z0-9]*|0|[1-9]\d*)(?:\.(?:[a-z0-9]*[a-z][a-z0-9]*|0|[1-9]\d*))*)?")


def wheel_name_version(filename: str) -> tuple[str, str]:
    """(canonical name, normalized version) of a wheel file name. Only `packaging.version` is imported, and
    only for a version not already normalized: `packaging.utils` brings in the tags machinery (sysconfig,
    platform), a fifth of a warm build's time."""
    parts = filename[:-4].split("-") if filename.endswith(".whl") else []
    if len(parts) not in (5, 6) or not parts[0]:
        raise ValueError(f"invalid wheel filename: {filename!r}")
    if _NORMALIZED_VERSION.fullmatch(parts[1]):
        return canonical_name(parts[0]), parts[1]
    from packaging.version import InvalidVersion, Version

    try:
        version = Version(parts[1])
    except InvalidVersion:
        raise ValueError(f"invalid wheel filename (version {parts[1]!r}): {filename!r}") from None
    return canonical_name(parts[0]), str(version)


def read_lock(path: Path) -> Lock:
    """A lock file read back, after checking every value it records is well-formed (RecipeError naming
    each bad key otherwise: a lock that cannot be trusted is refused before anything uses it), with what its
    build record beside it says (`with_record`: timings, this machine's paths) when that record is its own."""
    path = Path(path)
    if path.is_dir():
        path = path / LOCK_NAME
    if not path.is_file():
        raise RecipeError(f"{path}: no such lock file", hint="pass the stack.lock.toml written by `toolchain build`")
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeError(f"{path}: not a lock: not UTF-8 text (byte {exc.start})",
                          hint="pass the stack.lock.toml written by `toolchain build`") from None
    except OSError as exc:
        raise RecipeError(f"{path}: cannot read the lock: {exc.strerror or exc}") from None
    try:
        data = tomlio.loads(text)
    except tomlio.TOMLDecodeError as exc:
        raise RecipeError(f"{path}: not valid TOML: {exc}") from None
    if data.get("lock-version") != LOCK_VERSION:
        raise RecipeError(f"{path}: lock-version {data.get('lock-version')!r} is not supported "
                          f"(this tool reads {LOCK_VERSION})")
    problems = lock_data_problems(data)
    if problems:
        raise RecipeError([f"{path}: {p}" for p in problems],
                          hint="locks are written by `toolchain build` and must not be edited; rebuild it")
    try:
        closure = Closure.from_toml(data["resolve"], data.get("dependencies", [])) if "resolve" in data else None
        rest = {k: v for k, v in data.items() if k not in ("lock-version", "resolve", "dependencies")}
        lock = from_data(Lock, rest, kebab=True, unknown_ok=True, given={"path": path.resolve(), "closure": closure})
        return with_record(lock, read_record(path, raw))
    except (KeyError, TypeError, ValueError) as exc:
        what = exc if isinstance(exc, TypeError) else f"missing or wrong key {exc}"  # TypeError: core.serial names it
        raise RecipeError(f"{path}: malformed lock ({what})",
                          hint="locks are written by `toolchain build`; rebuild it") from None




# A wheel name of the plain form (one tag; a name without "__"), which packaging accepts whenever its version
# parses: checked without packaging.utils, whose tag machinery (sysconfig, platform, subprocess) a warm build
# would import only to read back its own lock. Any other name is left to packaging.
_PLAIN_WHEEL = Regex(r"[A-Za-z0-9](?:[A-Za-z0-9.]|_(?!_))*-[^-]+(?:-[0-9][^-]*)?"
                          r"-[a-z][a-z0-9_]*-[a-z0-9_]+-[a-z0-9_]+\.whl")


def _wheel_file(v: Any) -> bool:
    if not isinstance(v, str) or "/" in v or "\\" in v or "\0" in v:
        return False
    if _PLAIN_WHEEL.fullmatch(v):
        try:
            wheel_name_version(v)
        except ValueError:
            return False
        return True
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        parse_wheel_filename(v)
    except InvalidWheelFilename:
        return False
    return True


WHEEL_FILE: Check = ("a wheel file name (no directory)", _wheel_file)

# key: (required, check); nested tables and arrays of tables are checked by their own schema below
_LOCK_SCHEMA = schema(Lock, kebab=True)
RECIPE_SCHEMA: dict[str, tuple[bool, Check]] = {
    k.removeprefix("recipe."): v for k, v in _LOCK_SCHEMA.items() if k.startswith("recipe.")}
TOP_SCHEMA: dict[str, tuple[bool, Check]] = {k: v for k, v in _LOCK_SCHEMA.items() if not k.startswith("recipe.")}
COMPONENT_SCHEMA: dict[str, tuple[bool, Check]] = schema(LockedComponent, kebab=True)
# a prebuilt component is not built from a repository: it has no url, commit or command of its own
PREBUILT_COMPONENT_SCHEMA: dict[str, tuple[bool, Check]] = {
    **COMPONENT_SCHEMA, "url": (False, STR), "commit": (False, STR), "command": (False, STRS)}
# a lock names its wheels by file name alone: each a wheel's name
WHEEL_SCHEMA: dict[str, tuple[bool, Check]] = {**schema(WheelRef), "file": (True, WHEEL_FILE)}
PATCH_SCHEMA: dict[str, tuple[bool, Check]] = schema(Patch, kebab=True)
FETCHCONTENT_SCHEMA: dict[str, tuple[bool, Check]] = schema(FetchContentDep)
DEPENDENCY_SCHEMA: dict[str, tuple[bool, Check]] = schema(LockedDist, kebab=True)
RESOLVE_SCHEMA: dict[str, tuple[bool, Check]] = schema(Closure, kebab=True)
TOOLCHAIN_SCHEMA: dict[str, tuple[bool, Check]] = schema(ToolchainInfo, kebab=True)
TARGET_SCHEMA: dict[str, tuple[bool, Check]] = schema(TargetInfo, kebab=True)
INPUT_SCHEMA: dict[str, tuple[bool, Check]] = schema(InputFile)


@functools.cache
def _lazy_schemas() -> dict[str, dict[str, tuple[bool, Check]]]:
    """The schemas of tables only some locks hold, from the types that declare them (imported when a lock is
    checked, not with this module): `prebuilt`, `base` and `base.dists[]`."""
    from toolchain.build.prebuilt_wheels import PrebuiltFile
    from toolchain.target.baseenv import BaseDist, BaseEnv

    base = schema(BaseEnv, kebab=True)
    # the dists default to none in the type, but a lock's [base] always lists them
    return {"prebuilt": schema(PrebuiltFile), "base": {**base, "dists": (True, base["dists"][1])},
            "base-dist": schema(BaseDist, kebab=True)}


def _table_problems(value: Any, schema: dict[str, tuple[bool, Check]], where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: must be a table, got {_shown(value)}"]
    out = []
    for key, (required, (what, ok)) in schema.items():
        if key not in value:
            if required:
                out.append(f"{where}.{key}: missing")
        elif not ok(value[key]):
            out.append(f"{where}.{key}: must be {what}, got {_shown(value[key])}")
    return out


def _info_problems(value: Any, schema: dict[str, tuple[bool, Check]], where: str) -> list[str]:
    """[toolchain] / [target]: only the keys their type declares, each holding what it declares."""
    if not isinstance(value, dict):
        return [f"{where}: must be a table, got {_shown(value)}"]
    out = []
    for key, v in value.items():
        if key not in schema:
            out.append(f"{where}.{key}: not a key of a lock's [{where}] (known: {', '.join(schema)})")
        else:
            out += _table_problems({key: v}, {key: schema[key]}, where)
    return out


def lock_data_problems(data: dict[str, Any]) -> list[str]:
    """Every malformed value of a parsed lock, each naming its key (empty: well-formed)."""
    out = _table_problems(data.get("recipe"), RECIPE_SCHEMA, "recipe")
    out += _info_problems(data.get("toolchain", {}), TOOLCHAIN_SCHEMA, "toolchain")
    out += _info_problems(data.get("target", {}), TARGET_SCHEMA, "target")
    if "base" in data:
        out += _table_problems(data["base"], _lazy_schemas()["base"], "base")
        for j, item in enumerate(data["base"].get("dists", []) if isinstance(data["base"], dict) else []):
            out += _table_problems(item, _lazy_schemas()["base-dist"], f"base.dists[{j}]")
    for key, (_, check) in TOP_SCHEMA.items():
        if key in data and not check[1](data[key]):
            out.append(f"{key}: must be {check[0]}, got {_shown(data[key])}")
    if "resolve" in data:
        out += _table_problems(data["resolve"], RESOLVE_SCHEMA, "resolve")
    deps = data.get("dependencies", [])
    if not isinstance(deps, list):
        out.append(f"dependencies: must be an array of tables ([[dependencies]]), got {_shown(deps)}")
    else:
        for i, d in enumerate(deps):
            name = d.get("name") if isinstance(d, dict) else None
            out += _table_problems(d, DEPENDENCY_SCHEMA, f"dependencies[{i}]" + (f" ({name})" if isinstance(name, str) else ""))
    comps = data.get("components")
    if not isinstance(comps, list):
        return [*out, f"components: must be an array of tables ([[components]]), got {_shown(comps)}"]
    seen: set[str] = set()
    for i, c in enumerate(comps):
        name = c.get("name") if isinstance(c, dict) else None
        where = f"components[{i}]" + (f" ({name})" if isinstance(name, str) else "")
        prebuilt = isinstance(c, dict) and "prebuilt" in c
        problems = _table_problems(c, PREBUILT_COMPONENT_SCHEMA if prebuilt else COMPONENT_SCHEMA, where)
        if prebuilt and isinstance(c.get("prebuilt"), dict):
            problems += _table_problems(c["prebuilt"], _lazy_schemas()["prebuilt"], f"{where}.prebuilt")
        out += problems
        if problems and not isinstance(c, dict):
            continue
        if isinstance(name, str):
            if name in seen:
                out.append(f"{where}.name: {name!r} appears twice")
            seen.add(name)
        if isinstance(c.get("wheel"), dict):
            out += _table_problems(c["wheel"], WHEEL_SCHEMA, f"{where}.wheel")
        for key, item_schema in (("patches", PATCH_SCHEMA), ("fetchcontent", FETCHCONTENT_SCHEMA),
                                 ("inputs", INPUT_SCHEMA)):
            if isinstance(c.get(key), list):
                for j, item in enumerate(c[key]):
                    out += _table_problems(item, item_schema, f"{where}.{key}[{j}]")
    return out


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def wheel_problems(lock: Lock, *, missing_ok: bool = False) -> list[str]:
    """Each wheel of the lock that is not in its wheels/ directory with the recorded size and sha256."""
    problems = []
    for c in lock.components:
        p = lock.wheel_path(c)
        if not p.is_file():
            if not missing_ok:
                problems.append(f"{c.name}: wheel {p} is missing")
            continue
        size, digest = p.stat().st_size, sha256_file(p)
        if size != c.wheel.size:
            problems.append(f"{c.name}: {p.name} has sha256 {digest} ({size} bytes), the lock records "
                            f"{c.wheel.sha256} ({c.wheel.size} bytes)")
        elif digest != c.wheel.sha256:
            problems.append(f"{c.name}: {p.name} has sha256 {digest}, the lock records {c.wheel.sha256}")
    return problems


def verify_wheels(lock: Lock) -> None:
    """Every wheel the lock names exists with the recorded size and sha256; raises TestFailed otherwise."""
    problems = wheel_problems(lock)
    if problems:
        raise TestFailed("wheels do not match the lock " + str(lock.path) + ":\n"
                         + "\n".join(f"  - {p}" for p in problems),
                         hint="rebuild with `toolchain build --from-lock` or fetch the bundle again")


def locked_env(env: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """A component's build env as a lock records it: secrets masked, unset (None) variables left out."""
    return {k: v for k, v in redact_env(dict(env)).items() if v is not None}


def assemble_lock(plan: Plan, built: list[BuiltComponent], closure: Closure | None = None,
                  base: BaseEnv | None = None, *, host: dict[str, Any] | None = None) -> Lock:
    """The lock of a plan's built components (install order). Secrets are masked in everything it records
    (URL credentials, secret-named assignments in commands, in the recipe text too; the recipe's sha256 is
    then that of the masked text, which is what a rebuild from the lock reads back)."""
    from toolchain.recipe.load import recorded_origins  # (here: a lock read, an image made, never loads recipes)
    from toolchain.sources.patches import applied_at

    comps = []
    for b in built:
        c = b.plan.component
        comps.append(LockedComponent(
            name=c.name, url=redact_text(c.url), ref=c.ref, commit=c.commit, describe=b.describe, subdir=c.subdir,
            after=c.after, dist=c.dist, import_name=c.import_name,
            version=b.version or wheel_name_version(b.wheel.file)[1], install_args=tuple(redact_argv(c.install_args)),
            patches=tuple(replace(p, url=redact_text(p.url), applied=applied_at(p, c.subdir)) for p in b.plan.patches),
            env=locked_env(b.plan.env), command=tuple(redact_argv(c.command)), cache_key=b.plan.cache_key,
            build_seconds=b.seconds, wheel=b.wheel,
            fetchcontent=tuple(fetchcontent_table(d) for d in c.fetchcontent),
            built_against=b.built_against, compiler_cache=b.compiler_cache, jobs=b.jobs,
            jobs_source=b.jobs_source, metrics=b.metrics,
            prebuilt=to_table(b.plan.prebuilt) if b.plan.prebuilt is not None else {},
            inputs=b.plan.inputs))
    norms = sorted({n for b in built for n in b.normalizations})
    text, sha = plan.recipe.text, plan.recipe.sha256
    resolved = tomlio.loads(text)
    masked = redact_data(resolved)
    if masked != resolved:  # masked value by value: the text stays TOML that reads back to the same recipe
        text = tomlio.dumps(masked)
        sha = sha256_bytes(text.encode())
    return Lock(recipe_name=plan.recipe.name, recipe_path=str(plan.recipe.path), recipe_sha256=sha,
                recipe_origins=tuple(sorted((redact_text(k), redact_text(v))  # (mirror prefixes: URLs)
                                            for k, v in recorded_origins(plan.recipe).items())), recipe_partial=plan.recipe.partial,
                recipe_text=text, toolchain=plan.toolchain, target=plan.target,
                smoke=redact_data(plan.recipe.smoke.raw), components=tuple(comps), normalizations=tuple(norms),
                closure=closure, base=base, host=dict(host or {}))
