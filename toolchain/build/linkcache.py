"""The link cache: a link whose every input equals a remembered link's gives that link's output, without
linking. What runs INSIDE the target as a file (stdlib only, like intarget.py), as CMake's linker launcher:

    python linkcache.py DRIVER ARGS...      (CMAKE_<LANG>_LINKER_LAUNCHER, set by intarget.py's `build`)

Why: a build that links with `-flto` (ARK's CPU half: `-O3 -flto=auto`) does its code generation in the link,
which the compiler cache cannot skip: with every object a ccache hit, the link still compiles the whole module
again. Here the link's output is looked up by a key covering everything the linker reads:
  - each input file by its content (objects, archives, linker scripts, response files expanded), each `-l`
    library as the search finds it (the `-L` folders, then the compiler's own), each file a `-Wl,` option names;
  - the command line, every other argument verbatim, except where the link's own prefix maps say a path never
    reaches the output: `-f*-prefix-map=OLD=NEW` counts as NEW, and the working folder as the maps rewrite it
    (so the same sources linked in another tree of the tool's cache hit, as ccache's CCACHE_BASEDIR does);
  - the toolchain: the driver's name and `-v` (version, target, configuration), the content of the programs it
    runs (ld, collect2, lto-wrapper, lto1, the LTO plugin) and of the C runtime's files and libraries it links
    by default; LIBRARY_PATH, COMPILER_PATH, GCC_EXEC_PREFIX, LD_RUN_PATH.
A link this cannot key (a response file or input it cannot read, `--sysroot`, `-B`, a spec or plugin file,
profile data, or a second output: a map file, split DWARF, saved temporaries) runs as given, uncached; so
does a CMake configure check's (try_compile: its folder and target names are random, it would never hit).

The store: TOOLCHAIN_LINK_CACHE (a folder of the tool's cache; unset or empty: every link runs as given),
`<key[:2]>/<key>` holding the output. Written to a temporary file, fsynced, renamed into place (kill -9 leaves
a stray temporary, never a partial entry; concurrent builds write the same bytes); read only when it is a
regular file of this user's that no one else may write (core/trust's rule for the cache), copied to a
temporary file beside the output and renamed over it; a hit sets the entry's mtime, its last use, by which
`toolchain cache prune` dates it (build/linkprune.py). Large files' hashes are remembered by their stat
(`stat/`). Anything unexpected runs the link as given: the cache never fails a build. Each link appends
"hit", "miss" or "skip WHY" to TOOLCHAIN_LINK_STATSLOG when set (intarget.py counts them for the build's
report).
"""

from __future__ import annotations  # the target's python3 may be 3.9: annotations stay unevaluated

import contextlib
import hashlib
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile

VERSION = "linkcache-1"
ENV = "TOOLCHAIN_LINK_CACHE"
STATSLOG = "TOOLCHAIN_LINK_STATSLOG"
KEYED_ENV = ("LIBRARY_PATH", "COMPILER_PATH", "GCC_EXEC_PREFIX", "LD_RUN_PATH")
PREFIX_MAPS = ("-ffile-prefix-map=", "-fdebug-prefix-map=", "-fmacro-prefix-map=", "-fprofile-prefix-map=")
# a link that writes or reads more than this can key: run as given
UNKEYED = ("--sysroot", "-B", "-isysroot", "-specs", "--specs", "-wrapper", "-fplugin", "-fprofile-use",
           "-fauto-profile", "-save-temps", "-gsplit-dwarf", "-Wl,-Map", "-Wl,--Map", "-Wl,-M", "-Wl,--print-map",
           "-Wl,--out-implib", "-Wl,--dependency-file", "-Wl,--trace", "-Wl,-t", "-MD", "-MMD", "-MF", "-fdump",
           "-###", "-v", "--help", "--version", "-fcompare-debug", "-fstack-usage", "-fcallgraph-info", "-o-")
NOT_LINKS = ("-c", "-S", "-E", "-M", "-MM", "-fsyntax-only")
PROGRAMS = ("collect2", "ld", "lto-wrapper", "lto1", "liblto_plugin.so")
RUNTIME = ("Scrt1.o", "crt1.o", "crti.o", "crtn.o", "crtbeginS.o", "crtendS.o", "crtbegin.o", "crtend.o",
           "libc.so", "libc.so.6", "libc_nonshared.a", "libm.so", "libm.so.6", "libgcc.a", "libgcc_s.so",
           "libgcc_s.so.1", "libstdc++.so", "libstdc++.so.6", "libatomic.so")
TRY_COMPILE = ("/CMakeFiles/CMakeScratch/", "/CMakeFiles/CMakeTmp")  # where CMake's configure checks link
BIG = 1 << 20  # files at least this large have their hash remembered by their stat


class Unkeyed(Exception):
    """Why this link is run as given."""


def _regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def file_hash(path: str, store: str) -> str:
    """The sha256 of the file at `path`; a large one's is remembered in `store`/stat by its stat."""
    st = os.stat(path)
    memo = ""
    if st.st_size >= BIG:
        ident = f"{os.path.realpath(path)}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
        memo = os.path.join(store, "stat", hashlib.sha256(ident.encode()).hexdigest())
        remembered = _read_trusted(memo)
        if remembered is not None and len(remembered) == 64:
            return remembered.decode()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    if memo:
        with contextlib.suppress(OSError):
            _publish(memo, digest.encode())
    return digest


def own(st: os.stat_result) -> bool:
    """Whether a file or folder of this stat is one the link cache trusts: this user's, and no one else may
    write it (what the script reads back here, and what `toolchain cache prune` may remove: build/linkprune.py)."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _read_trusted(path: str) -> bytes | None:
    """The bytes of `path` when it is a regular file of this user's that no one else may write, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or not own(st):
            return None
        return f.read()


def _publish(path: str, data: bytes) -> None:
    """`data` at `path`: a temporary file beside it, fsynced, renamed into place."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def expand(args: list[str], cwd: str, depth: int = 0) -> list[str]:
    """`args` with each `@FILE` replaced by the arguments it holds (as gcc reads them); Unkeyed when unreadable."""
    out: list[str] = []
    for arg in args:
        if arg.startswith("@") and len(arg) > 1:
            path = os.path.join(cwd, arg[1:])
            if depth > 8 or not _regular(path):
                raise Unkeyed(f"response file {arg[1:]} cannot be read")
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                out.extend(expand(shlex.split(f.read()), cwd, depth + 1))
        else:
            out.append(arg)
    return out


def _mapped(path: str, maps: list[tuple[str, str]]) -> str:
    """`path` as the prefix maps rewrite it (the last matching map wins, as gcc applies them)."""
    for old, new in reversed(maps):
        if old and (path == old or path.startswith(old.rstrip("/") + "/")):
            return new + path[len(old):]
    return path


class Toolchain:
    """What the driver runs and links by default, asked of the driver (its answers remembered per process)."""

    def __init__(self, driver: str, store: str) -> None:
        self.driver, self.store = driver, store
        self._dirs: list[str] | None = None

    def ask(self, *args: str) -> str:
        done = subprocess.run([self.driver, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, check=False, timeout=60)
        if done.returncode != 0:
            raise Unkeyed(f"{os.path.basename(self.driver)} {' '.join(args)} failed")
        return done.stdout.decode(errors="replace")

    def search_dirs(self) -> list[str]:
        if self._dirs is None:
            found = [line.split("=", 1)[1] for line in self.ask("-print-search-dirs").splitlines()
                     if line.startswith("libraries:") and "=" in line]
            self._dirs = [os.path.normpath(d) for d in (found[0].split(os.pathsep) if found else []) if d]
        return self._dirs

    def find(self, names: list[str], dirs: list[str]) -> str | None:
        for folder in [*dirs, *self.search_dirs()]:
            for name in names:
                path = os.path.join(folder, name)
                if _regular(path):
                    return path
        return None

    def identity(self) -> list[str]:
        lines = [line for line in self.ask("-v").splitlines() if not line.startswith("COLLECT_")]
        out = [f"driver-v:{line}" for line in lines]
        for prog in PROGRAMS:
            named = self.ask(f"-print-prog-name={prog}").strip()
            path = named if "/" in named else (shutil.which(named) or "")
            if path and _regular(path):
                out.append(f"prog:{prog}:{file_hash(path, self.store)}")
        for name in RUNTIME:
            found = self.find([name], [])
            out.append(f"runtime:{name}:{file_hash(found, self.store) if found else '-'}")
        return out


def link_key(argv: list[str], cwd: str, env: dict[str, str], store: str) -> tuple[str, str]:
    """(the key of the link `argv` run in `cwd`, its output as given); Unkeyed when it cannot be keyed."""
    if any(part in cwd for part in TRY_COMPILE):
        raise Unkeyed("a CMake try_compile (its names are random: it never hits)")
    driver, args = argv[0], expand(argv[1:], cwd)
    for arg in args:
        if arg in NOT_LINKS:
            raise Unkeyed(f"not a link ({arg})")
        if any(arg == u or arg.startswith((u + "=", u + ",")) or (u == "-B" and arg.startswith("-B"))
               for u in UNKEYED):
            raise Unkeyed(f"{arg.split('=', 1)[0]} is not keyed")
    resolved = (shutil.which(driver, path=env.get("PATH")) or "") if "/" not in driver else driver
    if not resolved:
        raise Unkeyed(f"{driver} not found")
    tools = Toolchain(resolved, store)
    maps = [(a.split("=", 1)[1].rsplit("=", 1)[0], a.split("=", 1)[1].rsplit("=", 1)[1])
            for a in args if a.startswith(PREFIX_MAPS) and a.count("=") >= 2]

    def here(path: str) -> str:
        return os.path.join(cwd, path)

    libdirs = [a[2:] or "" for a in args if a.startswith("-L")]
    pieces = [VERSION, f"driver:{os.path.basename(driver)}", f"cwd:{_mapped(cwd, maps)}",
              *(f"env:{k}={env[k]}" for k in KEYED_ENV if k in env)]
    output = ""
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "-o" and i < len(args):
            output = args[i]
            pieces.append(f"-o {_mapped(os.path.abspath(here(output)), maps) if os.path.isabs(output) else output}")
            i += 1
        elif arg.startswith("-o") and arg != "-o":
            output = arg[2:]
            pieces.append(f"-o {output}")
        elif arg.startswith(PREFIX_MAPS) and arg.count("=") >= 2:
            flag, rest = arg.split("=", 1)
            pieces.append(f"{flag}=<{rest.rsplit('=', 1)[1]}>")
        elif arg == "-L" and i < len(args):
            pieces.append("-L")
            libdirs.append(args[i])
            i += 1
        elif arg.startswith("-L"):
            pieces.append("-L")
        elif arg.startswith("-l"):
            name = arg[2:] or (args[i] if i < len(args) else "")
            if not arg[2:]:
                i += 1
            names = [name[1:]] if name.startswith(":") else [f"lib{name}.so", f"lib{name}.a"]
            found = tools.find(names, [here(d) for d in libdirs if d])
            if found is None:
                raise Unkeyed(f"-l{name} not found")
            pieces.append(f"-l{name}:{file_hash(found, store)}")
        elif arg.startswith("-Wl,") or arg == "-Xlinker":
            parts = arg[4:].split(",") if arg.startswith("-Wl,") else [args[i] if i < len(args) else ""]
            if arg == "-Xlinker":
                i += 1
            pieces.append("linker:" + ",".join(_linker_piece(p, cwd, store) for p in parts))
        elif arg.startswith("-"):
            pieces.append(arg)
        elif _regular(here(arg)):
            shown = _mapped(os.path.normpath(here(arg)), maps) if os.path.isabs(arg) else arg
            pieces.append(f"input:{shown}:{file_hash(here(arg), store)}")
        else:
            pieces.append(f"arg:{arg}")
    if not output:
        raise Unkeyed("no -o output")
    pieces.extend(tools.identity())
    return hashlib.sha256("\n".join(pieces).encode(errors="surrogateescape")).hexdigest(), output


def _linker_piece(part: str, cwd: str, store: str) -> str:
    """One `-Wl,` argument: a file it names (itself, or after `=`) by its content too."""
    value = part.split("=", 1)[1] if "=" in part else part
    path = os.path.join(cwd, value)
    if value and _regular(path):
        return f"{part}:{file_hash(path, store)}"
    return part


def _note(env: dict[str, str], line: str) -> None:
    log = env.get(STATSLOG, "")
    if log:
        with contextlib.suppress(OSError), open(log, "a") as f:
            f.write(line.replace("\n", " ") + "\n")


def _restore(entry: bytes, output: str) -> None:
    folder = os.path.dirname(os.path.abspath(output))
    fd, tmp = tempfile.mkstemp(prefix=".link-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(entry)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # as the linker makes it: executable, less the umask
        os.replace(tmp, output)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def main(argv: list[str]) -> int:
    """Run the link `argv` (DRIVER ARGS...) through the cache: its exit code (the link's, or 0 for a hit)."""
    if not argv:
        sys.stderr.write("usage: linkcache.py DRIVER ARGS...\n")
        return 2
    env = dict(os.environ)
    store, cwd = env.get(ENV, ""), os.getcwd()
    key = output = ""
    if store:
        try:
            key, output = link_key(argv, cwd, env, store)
            path = os.path.join(store, key[:2], key)
            entry = _read_trusted(path)
            if entry is not None:
                _restore(entry, os.path.join(cwd, output))
                with contextlib.suppress(OSError):
                    os.utime(path, follow_symlinks=False)  # its last use: what `cache prune` dates it by
                _note(env, f"hit {output}")
                return 0
        except Unkeyed as why:
            _note(env, f"skip {why}")
            key = ""
        except (OSError, ValueError, subprocess.SubprocessError) as err:
            _note(env, f"skip {type(err).__name__}: {err}")
            key = ""
    done = subprocess.run(argv, check=False)
    if key and done.returncode == 0:
        path = os.path.join(cwd, output)
        try:
            with open(path, "rb") as f:
                data = f.read()
            _publish(os.path.join(store, key[:2], key), data)
            _note(env, f"miss {output}")
        except OSError as err:
            _note(env, f"skip not stored: {err}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

__all__ = ["ENV", "STATSLOG", "Unkeyed", "file_hash", "link_key", "main", "own"]
