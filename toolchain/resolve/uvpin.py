"""Resolve the built wheels' requirements with a kept resolver: `uv pip compile` (docs/DESIGN.md says why uv).

The built wheels are the input requirements (`name @ file://...`, in lock order) AND overrides, so every
requirement on a built distribution, wherever in the graph, is answered by the built file and never by an
index. uv runs twice against its warm cache: once writing PEP 751 (every candidate file of each pinned version
with its URL and sha256), once writing annotated requirements (which index served each package and who asked
for it). Of the candidates the one file pip would install on the target is kept (best tag for the target's
Python and platform; the sdist only when no wheel fits).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from toolchain.core import toml as tomlio
from toolchain.core.proc.runner import CommandFailed, CommandTimeout, merge_env, run
from toolchain.core.record import record, replace
from toolchain.core.redact import redact_text
from toolchain.core.regex import Regex
from toolchain.errors import BuildError, RecipeError, TransientError
from toolchain.recipe.model import ResolveSpec
from toolchain.resolve.closure import Closure, LockedDist, file_name
from toolchain.resolve.closure_memo import DEFAULT_MANYLINUX, expand_link, target_platform, target_python
from toolchain.resolve.failure import raise_classified
from toolchain.target.facts import TargetInfo

if TYPE_CHECKING:
    from toolchain.console import UI

RESOLVE_TIMEOUT = 1800
RESOLVING = "resolving the runtime closure"


class ResolveError(BuildError):
    """The closure cannot be resolved (exit 1): names the requirement and the component that asked for it."""


@record
class BuiltWheel:
    """A wheel the tool built (taken as given): its component, distribution name and file."""
    component: str
    wheel: Path

    @property
    def dist(self) -> str:
        """The distribution name of the built wheel, from its file name."""
        return str(parse_wheel_filename(self.wheel.name)[0])

    @property
    def version(self) -> str:
        """The version of the built wheel, from its file name."""
        return str(parse_wheel_filename(self.wheel.name)[1])

    def requirement(self) -> str:
        """A direct-reference requirement on the wheel file ("name @ file:///...") for the resolver."""
        return f"{self.dist} @ {self.wheel.resolve().as_uri()}"


_UV_LOCK = threading.Lock()


def uv_binary() -> str:
    """The path of the uv executable (the `uv` wheel's, else uv on PATH)."""
    try:
        from uv import find_uv_bin  # the `uv` wheel from PyPI (a dependency of this package)

        # one thread at a time: on Python 3.11 sysconfig fills its config variables unguarded, so a second
        # thread (bisect's builds side by side) read EXE as None there ("can only concatenate str")
        with _UV_LOCK:
            return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found:
            return found
    raise BuildError("the resolver `uv` is not installed", hint="pip install uv (or build with --no-resolve)")


def uv_version(uv: str) -> str:
    """What `uv --version` reports, as "uv X.Y.Z" (a lock records it)."""
    out = run([uv, "--version"], capture=True, env=_uv_env()).stdout.split()
    return f"uv {out[1]}" if len(out) > 1 else "uv"


def resolve_closure(spec: ResolveSpec, target: TargetInfo, built: Sequence[BuiltWheel], cache_dir: Path,
                    log: Path, ui: UI | None = None, *, refresh: bool = False, cached_first: bool = False,
                    asked: Callable[[], None] | None = None) -> Closure:
    """The pinned closure of `built` (lock order). Raises ResolveError naming the requirement and the component,
    TransientError for a network failure or a full disk. `refresh`: ask the indexes again (uv --refresh), not
    uv's cache of what they served. `cached_first`: resolve from uv's cache of what the indexes served first
    (uv --offline), asking them only where it cannot answer (a bisect after its first resolution: one view of
    the index for all its locks, each without a revalidation per package, auto-round's ~70: 7-14 s vs 0.6 s).
    `asked`: called once uv's cache holds what the indexes served for it (the closure resolved; before the
    second pass that says who asked for each pin): the other locks may resolve from it then."""
    spec, recorded = _expanded(spec)
    recorded_links = tuple(recorded.values())  # as the recipe says ({demo}/... stays portable)
    python, platform = target_python(spec, target), target_platform(spec, target)
    notes = _unmet_built_requirements(built)
    uv = uv_binary()
    base = Closure(resolver=uv_version(uv), indexes=tuple(spec.indexes), find_links=recorded_links,
                   index_strategy=spec.index_strategy, python_version=python, platform=platform, dists=(),
                   notes=notes)
    if not any(_requirements(b.wheel) for b in built):
        return base  # nothing to resolve: no resolver run, no index asked
    for link in spec.find_links:
        if "://" not in link and not Path(link).is_dir():
            raise RecipeError(f"[resolve] find-links: {link} is not a directory",
                              hint="relative find-links paths are relative to the recipe file")
    if not spec.indexes and not spec.find_links:
        raise ResolveError("the built wheels have requirements, but the recipe's [resolve] names no index and no "
                           "find-links", hint="add `indexes = [...]` or `find-links = [...]` to [resolve], or "
                                              "build with --no-resolve")
    resolved_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        with tempfile.TemporaryDirectory(prefix="toolchain-resolve-") as tmp:
            work = Path(tmp)
            try:
                pylock, annotated = _compile(uv, spec, python, platform, built, work, cache_dir, log,
                                             refresh=refresh, cached_first=cached_first and not refresh,
                                             asked=asked)
            except CommandTimeout as exc:
                raise TransientError(f"{RESOLVING} failed: the resolver ran out of time after {exc.timeout:g}s",
                                     kind="network", hint=f"a slow or stalled index; run again (log: {log})") from None
            except CommandFailed as exc:
                raise_classified(exc.tail, what=RESOLVING, log=log, disk_fallback=str(cache_dir))
                raise _explain(exc, uv, spec, python, platform, built, work, cache_dir, log) from None
    except OSError as exc:  # our own files: the work folder, the log, uv's cache folder
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise TransientError(f"{RESOLVING} failed: no space left on device ({exc.filename or cache_dir})",
                                 kind="disk-full", hint="free space there (or point --cache-dir / TMPDIR at a "
                                                        "larger disk) and run the same command again") from None
        raise
    built_names = {canonicalize_name(b.dist) for b in built}
    via, source = _annotations(annotated)
    tags = supported_tags(python, platform)
    dists = []
    for pkg in pylock.get("packages", []):
        name = canonicalize_name(pkg["name"])
        if name in built_names:
            continue
        dists.append(_pick(pkg, tags, python, platform, via.get(name, ()), source.get(name, ""), spec, recorded))
    return replace(base, dists=tuple(sorted(dists, key=lambda d: d.name)), resolved_at=resolved_at)


def pin_files(requirement: str, spec: ResolveSpec, target: TargetInfo, cache_dir: Path,
              log: Path) -> tuple[LockedDist, ...]:
    """The file pip would install on the target for `requirement` alone (its dependencies not resolved:
    `uv pip compile --no-deps`, with the recipe's indexes, find-links and index strategy), for each package uv
    pins: URL, sha256, and the index as the recipe names it. The best wheel for the target's tags, else the
    sdist. CommandFailed / CommandTimeout are uv's own failures, for the caller to name."""
    spec, recorded = _expanded(spec)
    python, platform = target_python(spec, target), target_platform(spec, target)
    uv = uv_binary()
    with tempfile.TemporaryDirectory(prefix="toolchain-pin-") as tmp:
        reqs, out = Path(tmp) / "requirement.txt", Path(tmp) / "pylock.toml"
        reqs.write_text(requirement + "\n")
        run([*_argv(uv, spec, python, platform, cache_dir), "--no-deps", str(reqs), "--format", "pylock.toml",
             "-o", str(out)], env=_uv_env(), log=log, timeout=RESOLVE_TIMEOUT)
        packages = tomlio.load_file(out).get("packages", [])
    tags = supported_tags(python, platform)
    return tuple(_pick(pkg, tags, python, platform, (), "", spec, recorded) for pkg in packages)


def _expanded(spec: ResolveSpec) -> tuple[ResolveSpec, dict[str, str]]:
    """`spec` with its find-links expanded to this machine's paths, and {expanded link as a URL: the link as
    the recipe names it}."""
    expanded = replace(spec, find_links=tuple(expand_link(link) for link in spec.find_links))
    return expanded, {(Path(x).as_uri() if "://" not in x else x).rstrip("/"): r
                      for x, r in zip(expanded.find_links, spec.find_links, strict=True)}


def _uv_env() -> dict[str, str]:
    """This process's environment without UV_* settings (the recipe says where to resolve from)."""
    layer: dict[str, str | None] = {k: None for k in os.environ if k.startswith("UV_")}
    layer.update({"UV_NO_PROGRESS": "1", "NO_COLOR": "1"})
    return merge_env(os.environ, layer)


def _argv(uv: str, spec: ResolveSpec, python: str, platform: str, cache_dir: Path) -> list[str]:
    argv = [uv, "pip", "compile", "--no-config", "--no-header", "--quiet", "--cache-dir", str(cache_dir / "uv"),
            "--python-version", python, "--python-platform", platform, "--index-strategy", spec.index_strategy]
    if spec.indexes:
        argv += ["--index-url", spec.indexes[0]]
        for extra in spec.indexes[1:]:
            argv += ["--extra-index-url", extra]
    else:
        argv.append("--no-index")
    for link in spec.find_links:
        argv += ["--find-links", link]
    return argv


def _compile(uv: str, spec: ResolveSpec, python: str, platform: str, built: Sequence[BuiltWheel], work: Path,
             cache_dir: Path, log: Path, *, refresh: bool = False,
             cached_first: bool = False, asked: Callable[[], None] | None = None) -> tuple[dict[str, Any], str]:
    reqs = work / "built.txt"
    reqs.write_text("".join(b.requirement() + "\n" for b in built))
    argv = [*_argv(uv, spec, python, platform, cache_dir), "--override", str(reqs), str(reqs)]
    out, annotated = work / "pylock.toml", work / "annotated.txt"
    first = [*argv, "--refresh"] if refresh else argv
    try:
        run([*first, *(["--offline"] if cached_first else []), "--format", "pylock.toml", "-o", str(out)],
            env=_uv_env(), log=log, timeout=RESOLVE_TIMEOUT)
    except CommandFailed as exc:
        if not cached_first:
            raise
        if not _offline_after_fetching(exc.tail, _argv(uv, spec, python, platform, cache_dir),
                                       [*first, "--offline", "--format", "pylock.toml", "-o", str(out)], work, log):
            run([*first, "--format", "pylock.toml", "-o", str(out)], env=_uv_env(), log=log, timeout=RESOLVE_TIMEOUT)
    if asked is not None:
        asked()
    # the same resolution again, for who asked for each pin: from what the first run just fetched, offline (a
    # warm index costs uv a revalidation per package, auto-round's 71: 1.2 s, offline 0.2 s); online only
    # where the cache cannot answer it
    notes = [*argv, "--emit-index-annotation", "-o", str(annotated)]
    try:
        run([*notes, "--offline"], env=_uv_env(), log=log, timeout=RESOLVE_TIMEOUT)
    except CommandFailed:
        run(notes, env=_uv_env(), log=log, timeout=RESOLVE_TIMEOUT)
    return tomlio.load_file(out), annotated.read_text()


OFFLINE_ROUNDS = 4  # fetches of what an offline resolution lacked before one online resolution asks for everything
# what uv --offline says it lacks: versions it has no metadata of, packages it never saw
_UNAVAILABLE = Regex(r"(?:all versions of )?(\S+) needs? to be downloaded from a registry")
_UNAVAILABLE_ALL = Regex(r"all of:\n((?:[ \t]+\S+\n)+)[ \t]+need to be downloaded from a registry")
_NOT_CACHED = Regex(r"(\S+) was not found in the cache")


def _offline_after_fetching(failure: str, base: list[str], offline: list[str], work: Path, log: Path) -> bool:
    """Whether the offline resolution `offline` succeeded once uv's cache got what `failure` (its output) says
    it lacked, asked of the indexes alone with their dependencies (`missing`): a bisect's numpy<2 after a
    numpy 2 closure needs numpy 1.26's metadata, then older pandas' and datasets': ~1 s each, where an online
    resolution revalidates every package of the closure and builds its sdists' metadata again (auto-round's
    ~120: 3-4 s of CPU, as much as the first). False (the caller resolves online): uv named nothing to fetch,
    named what was fetched already, a fetch failed, or OFFLINE_ROUNDS fetches were not enough."""
    asked: set[str] = set()
    for _ in range(OFFLINE_ROUNDS):
        wanted = missing(failure)
        if not wanted or set(wanted) <= asked:
            return False
        asked.update(wanted)
        reqs = work / "missing.txt"
        groups = [wanted] if len(wanted) == 1 else [wanted, *([r] for r in wanted)]
        for group in groups:  # all at once; if they do not resolve together, one by one
            reqs.write_text("".join(f"{r}\n" for r in group))
            try:
                run([*base, str(reqs), "-o", str(work / "fetched.txt")], env=_uv_env(), log=log,
                    timeout=RESOLVE_TIMEOUT)
            except CommandFailed:
                if len(group) == 1:
                    return False
                continue
            if group is wanted:
                break
        try:
            run(offline, env=_uv_env(), log=log, timeout=RESOLVE_TIMEOUT)
            return True
        except CommandFailed as exc:
            failure = exc.tail
    return False


def missing(failure: str) -> list[str]:
    """What uv --offline's `failure` says its cache lacks, as requirements to fetch, one per package (the
    highest range uv names of it: it lists them lowest first), sorted: `numpy<=1.26.4,>=1.17.0` for "numpy>=
    1.17.0,<=1.26.4 needs to be downloaded from a registry", `numba` for "numba was not found in the cache"."""
    texts = [*_UNAVAILABLE.findall(failure), *_NOT_CACHED.findall(failure)]
    texts += [line for block in _UNAVAILABLE_ALL.findall(failure) for line in block.split()]
    found: dict[str, str] = {}
    for text in texts:
        try:
            req = Requirement(text.strip(".,:"))
        except InvalidRequirement:
            continue
        found[str(canonicalize_name(req.name))] = f"{canonicalize_name(req.name)}{req.specifier}"
    return sorted(found.values())


def _annotations(text: str) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """{name: names that asked for it}, {name: index it came from} from uv's annotated requirements."""
    via: dict[str, list[str]] = {}
    source: dict[str, str] = {}
    current = None
    in_via = False
    for line in text.splitlines():
        if line and not line.startswith((" ", "#")):
            head = re.split(r"[=@ ;\[]", line.strip(), maxsplit=1)[0]
            current = str(canonicalize_name(head))
            via.setdefault(current, [])
            in_via = False
            continue
        body = line.strip().lstrip("#").strip()
        if current is None or not body:
            continue
        if body.startswith("from "):
            source[current] = body[5:].strip()
        elif body.startswith("via "):
            via[current].append(body[4:].strip())
        elif body == "via":
            in_via = True
        elif in_via:
            via[current].append(body)
    clean = {k: tuple(str(canonicalize_name(v)) for v in vs if not v.startswith("-")) for k, vs in via.items()}
    return clean, source


def supported_tags(python: str, platform: str) -> list[Any]:
    """The target's wheel tags, most preferred first (what pip on the target would accept)."""
    from packaging import tags

    major, minor = (int(x) for x in python.split(".")[:2])
    m = re.match(r"^(\w+?)-(?:unknown-linux-gnu|manylinux_?(\d+)_(\d+)|linux)$", platform)
    if m:
        arch = m.group(1)
        glibc_minor = int(m.group(3)) if m.group(3) else int(DEFAULT_MANYLINUX.split("_")[1])
        plats = [f"manylinux_2_{n}_{arch}" for n in range(glibc_minor, 4, -1)]
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        plats = [p for n, p in zip(range(glibc_minor, 4, -1), plats, strict=False)
                 for p in ([p, f"{legacy[n]}_{arch}"] if n in legacy else [p])]
        plats.append(f"linux_{arch}")
    else:
        plats = [platform.replace("-", "_")]
    version = (major, minor)
    return [*tags.cpython_tags(version, platforms=plats),
            *tags.compatible_tags(version, f"cp{major}{minor}", plats)]


def _pick(pkg: dict[str, Any], tags: list[Any], python: str, platform: str, via: tuple[str, ...], index: str,
          spec: ResolveSpec, recorded: dict[str, str]) -> LockedDist:
    rank = {t: i for i, t in enumerate(tags)}
    best, best_rank = None, len(rank)
    for w in pkg.get("wheels", []):
        fname = w.get("name") or file_name(w.get("url", "") or w.get("path", ""))
        try:
            wtags = parse_wheel_filename(fname)[3]
        except ValueError:
            continue
        r = min((rank[t] for t in wtags if t in rank), default=None)
        if r is not None and r < best_rank:
            best, best_rank = w, r
    chosen = best or pkg.get("sdist")
    name, version = str(canonicalize_name(pkg["name"])), str(pkg["version"])
    if not chosen:
        raise ResolveError(f"{name} {version}: no wheel for Python {python} on {platform} and no sdist",
                           hint="set [resolve] platform / python-version to the machine that installs the lock")
    url = chosen.get("url") or Path(chosen["path"]).resolve().as_uri()
    sha = (chosen.get("hashes") or {}).get("sha256", "")
    if not sha:
        raise ResolveError(f"{name} {version}: the index serves {url} without a sha256",
                           hint="use an index that publishes hashes (PEP 503 #sha256= fragments)")
    size = int(chosen.get("size", 0) or 0)
    local = Path(unquote(urlparse(url).path)) if url.startswith("file:") else None
    if not size and local is not None and local.is_file():
        size = local.stat().st_size
    return LockedDist(name=name, version=version, file=chosen.get("name") or file_name(url), url=url, sha256=sha,
                      size=size, index=_recorded_index(index, recorded) or _guess_index(url, spec), required_by=via)


def _recorded_index(index: str, recorded: dict[str, str]) -> str:
    """The index as the recipe names it ({demo}/wheelhouse, not this machine's path of it)."""
    return recorded.get(index.rstrip("/"), index)


def _guess_index(url: str, spec: ResolveSpec) -> str:
    for link in spec.find_links:
        if url.startswith(Path(link).as_uri() if "://" not in link else link):
            return link
    return spec.indexes[0] if len(spec.indexes) == 1 else ""


def _requirements(wheel: Path) -> list[Requirement]:
    """The wheel's Requires-Dist (extras-only requirements left out)."""
    import zipfile
    from email.parser import HeaderParser

    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        msg = HeaderParser().parsestr(zf.read(meta).decode("utf-8"))
    out = []
    for line in msg.get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or "extra" not in str(req.marker):
            out.append(req)
    return out


def _unmet_built_requirements(built: Sequence[BuiltWheel]) -> tuple[str, ...]:
    """Requirements of one built wheel on another that the built version does not meet (it is used anyway,
    as the real stack does with vLLM's vllm_xpu_kernels==X pin and locally built kernels)."""
    versions = {canonicalize_name(b.dist): (b, Version(b.version)) for b in built}
    notes = []
    for b in built:
        for req in _requirements(b.wheel):
            other = versions.get(canonicalize_name(req.name))
            if other and req.specifier and not req.specifier.contains(other[1], prereleases=True):
                notes.append(f"{b.component} ({b.dist}) requires {req}; the lock has the built "
                             f"{other[0].dist} {other[1]} ({other[0].component}), taken as given")
    return tuple(notes)


def _explain(exc: CommandFailed, uv: str, spec: ResolveSpec, python: str, platform: str,
             built: Sequence[BuiltWheel], work: Path, cache_dir: Path, log: Path) -> ResolveError:
    """Which component's requirements make the closure unresolvable: resolve the lock-order prefixes."""
    culprit = built[-1]
    for i in range(1, len(built)):
        try:
            _compile(uv, spec, python, platform, built[:i], work, cache_dir, log)
        except CommandFailed:
            culprit = built[i - 1]
            break
    message = exc.tail.strip()
    named = [str(r) for r in _requirements(culprit.wheel) if re.search(
        rf"(?<![\w.-]){re.escape(canonicalize_name(r.name))}(?![\w.-]*[\w])", message.lower().replace("_", "-"))]
    asked = ", ".join(named) or "its requirements"
    chain = requirement_chain(message, [canonicalize_name(Requirement(r).name) for r in named])
    asked += "".join(f" → {dist} requires {req}" for dist, req in chain)
    where = redact_text(", ".join(spec.indexes + spec.find_links)) or "nothing"
    return ResolveError(f"cannot resolve the runtime closure: component {culprit.component} "
                        f"({culprit.wheel.name}) requires {asked}, which {where} cannot satisfy for Python "
                        f"{python} on {platform}\n  resolver said:\n"
                        + "\n".join("    " + line for line in message.splitlines()[-8:]),
                        hint="add the index or find-links that serves it to [resolve] in the recipe, fix the "
                             "requirement with a patch, or build with --no-resolve (the lock then pins no "
                             f"dependencies); log: {log}")


# uv's explanation: "tomli==2.3.0 depends on leaf>=1", "all versions of tomli depend on leaf>=1"
_DEPENDS = Regex(r"([A-Za-z0-9][\w.-]*)(?:[=<>!~]=?[^\s,]*)? depends? on ([A-Za-z0-9][\w.-]*(?:[<>=!~]=?[^\s,]*)?)")
_MISSING = Regex(r"([A-Za-z0-9][\w.-]*)(?:[<>=!~]=?[^\s,]*)? was not found|no versions? of ([A-Za-z0-9][\w.-]*)")


def requirement_chain(message: str, start: Sequence[str]) -> list[tuple[str, str]]:
    """[(distribution, requirement)] from a requirement of the component down to what cannot be met, as the
    resolver's explanation links them ("A depends on B>=1"); [] when it names no such link."""
    edges: dict[str, list[tuple[str, str]]] = {}
    for m in _DEPENDS.finditer(message):
        edges.setdefault(str(canonicalize_name(m.group(1))), []).append(
            (str(canonicalize_name(re.split(r"[<>=!~]", m.group(2))[0])), m.group(2).rstrip(".")))
    missing = {str(canonicalize_name(m.group(1) or m.group(2))) for m in _MISSING.finditer(message)}
    paths: list[list[tuple[str, str]]] = []

    def walk(name: str, path: list[tuple[str, str]], seen: set[str]) -> None:
        paths.append(path)
        for nxt, req in edges.get(name, ()):
            if nxt not in seen:
                walk(nxt, [*path, (name, req)], seen | {nxt})

    for name in start:
        walk(str(name), [], {str(name)})
    # the chain that ends at what no location serves, else the longest
    def ends_unmet(path: list[tuple[str, str]]) -> bool:
        return bool(path) and str(canonicalize_name(re.split(r"[<>=!~]", path[-1][1])[0])) in missing

    return max(paths, key=lambda p: (ends_unmet(p), len(p)), default=[])
