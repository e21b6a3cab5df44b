"""A warm no-op, answered from what the same run printed last time.

A warm no-op build (nothing changed since the last build into the same `--out`) reads a recipe, a lock,
cached metadata and remembered probes, writes nothing and prints the same answer each time. Most of its
time is the interpreter importing the tool. So a run that only read is recorded: every path it looked at
(opened for reading, stat'ed, listed: a Python audit hook and a wrapper of `os.stat`, `os.lstat` and
`os.access` while the command runs), every module file it ran, and what it printed, to which stream, in
which order, and its exit code. The next run with the same arguments, working directory, environment,
terminals and interpreter checks those paths with one `stat` each (inode, mtime in ns, size; or absent)
and, when none changed, prints the recorded answer without importing the rest of the tool.

A run is not recorded (and never answered from a record) when it
- is not a `build` (the only command whose warm answer is a pure function of files);
- exits with anything but 0, or is stopped;
- writes, renames, removes or creates anything, starts a process, opens a socket, or looks at a path
  through an open file descriptor the recorder cannot see (it is then not a no-op);
- read a path changed while it ran, or changed within the clock's granularity before it started (as
  git's "racily clean" index entries: the stat would not tell a later change apart);
- runs with TOOLCHAIN_FULL_RUN set (to any value but empty or 0).
Live figures that size compile jobs are read inside `live_readings()`: not watched (a run that compiles
writes, so it is never recorded). TOOLCHAIN_NOOP_DEBUG=1 says on stderr why a run was not recorded or not
answered.

Records live in `<cache>/noop/<key>.json` (mode 0600), the key a sha256 of the arguments, working
directory, environment, terminal state, user and interpreter. They hold no environment value, only paths,
stats and the run's own (already redacted) output; the least recently written beyond KEEP are removed.
Deleting the folder forgets them.

This module imports little (json and hashlib when a record is looked up): it runs before the rest of the
tool is imported."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from stat import S_IFMT, S_ISDIR
from types import ModuleType
from typing import Any, TextIO

FULL_RUN = "TOOLCHAIN_FULL_RUN"
DEBUG = "TOOLCHAIN_NOOP_DEBUG"
CACHE_ENV = "TOOLCHAIN_CACHE_DIR"
ELIGIBLE = frozenset({"build"})
FORMAT = 1
# variables a shell changes between two runs of the same command; nothing the tool reads
VOLATILE_ENV = frozenset({"_", "OLDPWD", "SHLVL", "PWD"})
# a change this close (ns) before a run started could share the mtime a stat already showed (the kernel's
# coarse clock); on a file system that keeps whole seconds (FAT: two) the window is the granularity's
RACY_NS = 20_000_000
RACY_COARSE_NS = 3_000_000_000
KEEP = 256  # records kept in <cache>/noop
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_SPOILING = frozenset({
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.startfile", "pty.spawn", "socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo",
    "os.rename", "os.replace", "os.remove", "os.unlink", "os.rmdir", "os.link", "os.symlink", "os.truncate",
    "os.chmod", "os.chown", "os.utime", "os.chflags", "os.lchown", "os.mkfifo", "os.mknod", "os.setxattr",
    "os.removexattr", "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.copytree",
    "shutil.move", "shutil.rmtree", "shutil.make_archive", "shutil.unpack_archive", "tempfile.mkstemp",
    "tempfile.mkdtemp", "sqlite3.connect", "ctypes.dlopen", "os.kill", "os.killpg", "signal.pthread_kill",
    "urllib.Request", "http.client.connect", "ftplib.connect", "smtplib.connect", "mmap.__new__",
})
_EVENT_PREFIXES = ("os.exec", "os.spawn", "os.posix_spawn", "socket.")
_EVENTS = _SPOILING | {"open", "os.listdir", "os.scandir", "os.mkdir", "os.rename", "os.replace"}

_STAT, _LSTAT = os.stat, os.lstat  # (the real ones: a recording replaces those in os)


def stat_key(path: str) -> list[int] | None:
    """What tells a path's change apart: inode, mtime (ns), size; None when it is absent."""
    try:
        st = _STAT(path)
    except (OSError, ValueError):
        return None
    return [st.st_ino, st.st_mtime_ns, st.st_size]


_KERNEL = ("/proc/", "/sys/")  # files the kernel makes as they are read: their stat says nothing


def _probe(path: str, how: str) -> Any:
    """A path's key as a record keeps it, by how the run looked at it: "list" (its entries: the folder's
    stat_key), "read" or "stat" (a file's stat_key, a kernel file's contents' sha256; of a folder only
    which one it is, ["dir", inode]: a stat does not see its entries), "lstat" (the same, not following a
    symbolic link)."""
    if how == "list":
        return stat_key(path)
    if path.startswith(_KERNEL) and how == "read":
        import hashlib

        try:
            with open(path, "rb") as fh:
                return hashlib.sha256(fh.read()).hexdigest()
        except OSError:
            return None
    try:
        st = _LSTAT(path) if how == "lstat" else _STAT(path)
    except (OSError, ValueError):
        return None
    if path.startswith(_KERNEL):
        return ["kernel", S_IFMT(st.st_mode)]
    if S_ISDIR(st.st_mode):
        return ["dir", st.st_ino]
    return [st.st_ino, st.st_mtime_ns, st.st_size]


def default_cache_dir(env: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """The tool's cache folder when no --cache-dir is given (build/cache.py uses this one)."""
    if env.get(CACHE_ENV):
        return env[CACHE_ENV]
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "xpu-toolchain")


def command_of(argv: Sequence[str]) -> str | None:
    """The command of a command line: its first word that is not an option (cli.main asks the same)."""
    return next((a for a in argv if not a.startswith("-")), None)


def _cache_dir(argv: Sequence[str]) -> str:
    for i, arg in enumerate(argv):
        if arg == "--cache-dir" and i + 1 < len(argv):
            return os.path.abspath(argv[i + 1])
        if arg.startswith("--cache-dir="):
            return os.path.abspath(arg.split("=", 1)[1])
    return os.path.abspath(default_cache_dir())


def _terminal(fd: int) -> list[int] | None:
    try:
        if not os.isatty(fd):
            return None
        size = os.get_terminal_size(fd)
    except OSError:
        return [0, 0]
    return [size.columns, size.lines]


def _key(argv: Sequence[str]) -> str | None:
    import hashlib
    import json

    try:
        cwd = os.getcwd()
    except OSError:
        return None
    env = sorted((k, v) for k, v in os.environ.items() if k not in VOLATILE_ENV)
    mask = os.umask(0o22)  # (read by setting it: put back at once)
    os.umask(mask)
    what = [FORMAT, list(argv), cwd, env, [_terminal(fd) for fd in (0, 1, 2)], os.getuid(), mask,
            sys.executable, sys.version, sys.flags.optimize]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:32]


def _enabled(argv: Sequence[str]) -> bool:
    return os.environ.get(FULL_RUN, "") in ("", "0") and command_of(argv) in ELIGIBLE


def record_path(argv: Sequence[str]) -> str | None:
    """`<cache>/noop/<key>.json` for this command line in this process's folder and environment."""
    key = _key(argv)
    return None if key is None else os.path.join(_cache_dir(argv), "noop", key + ".json")


def answer(argv: Sequence[str]) -> int | None:
    """The exit code after printing the recorded answer of `argv`, or None: run it for real."""
    if not _enabled(argv):
        return None
    path = record_path(argv)
    if path is None:
        return None
    try:
        with open(path, "rb") as fh:
            import json

            kept = json.loads(fh.read())
        if kept.get("format") != FORMAT:
            return None
        for file, how, key in kept["watch"]:
            if _probe(file, how) != key:
                if os.environ.get(DEBUG):
                    sys.stderr.write(f"toolchain: a full run: {file} changed since the recorded one\n")
                return None
        out = kept["out"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        for stream, text in out:
            target = sys.stdout if stream == 1 else sys.stderr
            target.write(text)
            if stream == 2:
                target.flush()
        sys.stdout.flush()
    except (OSError, ValueError):  # (stdout closed early: as a full run's output, it fails)
        return 1
    return int(kept["code"])


class _PerThread(threading.local):
    busy = False  # the recorder itself stats and opens: not the run's doing
    live = 0      # inside `live_readings()`: reads not watched (writes still count)


def _racy(mtime_ns: int) -> int:
    """How close before a run's start a change leaves a stat that a later change of the same size could share:
    a whole-second mtime is taken for a file system that keeps no finer (ext4 and most others keep ns)."""
    return RACY_COARSE_NS if mtime_ns % 1_000_000_000 == 0 else RACY_NS


def _byte_code(name: str) -> bool:
    """What the import system writes: __pycache__, X.pyc and its temporary X.pyc.<id>."""
    base = os.path.basename(name)
    return base == "__pycache__" or base.endswith(".pyc") or base.rpartition(".")[0].endswith(".pyc")


class _Tee:
    """A text stream that passes everything on and keeps (stream number, text) in order."""

    def __init__(self, inner: TextIO, number: int, recorder: Recorder) -> None:
        self._inner, self._number, self._recorder = inner, number, recorder

    def write(self, text: str) -> int:
        self._recorder.printed(self._number, text)
        return self._inner.write(text)

    def writelines(self, lines: Sequence[str]) -> None:
        for line in lines:
            self.write(line)

    @property
    def buffer(self) -> Any:  # bytes written past the record: the run cannot be replayed
        self._recorder.spoil("wrote bytes to a standard stream")
        return self._inner.buffer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class Recorder:
    """What one run looked at and printed; `keep(code)` stores it when the run qualifies."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        self.enabled = _enabled(argv)
        self.spoiled: str | None = None if self.enabled else "not recorded"
        self.seen: dict[tuple[str, str], Any] = {}  # (path, how) → _probe(path, how)
        self.out: list[list[Any]] = []
        self.started_ns = 0
        self.active = False
        self.local = _PerThread()

    # -- what the run did --------------------------------------------------------------------------------

    def spoil(self, why: str) -> None:
        if self.spoiled is None:
            self.spoiled = why

    def printed(self, stream: int, text: str) -> None:
        if self.active and text:
            if self.out and self.out[-1][0] == stream:
                self.out[-1][1] += text
            else:
                self.out.append([stream, text])

    def looked(self, path: Any, how: str) -> None:
        if self.spoiled or self.local.live:
            return
        if isinstance(path, int):
            return  # an open descriptor: its file was seen when it was opened
        try:
            name = os.path.abspath(os.fsdecode(path))
        except TypeError:
            self.spoil(f"looked at {path!r}")
            return
        if (name, how) not in self.seen:
            self.seen[name, how] = _probe(name, how)

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.spoiled:
            return
        if event == "open":
            path, mode, flags = args
            if path is None or isinstance(path, int):
                return
            writes = (mode is not None and any(c in mode for c in "wax+")) or \
                (mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS)
            name = os.fsdecode(path) if isinstance(path, bytes) else os.fspath(path)
            if _byte_code(name):
                return  # (a module's source file is watched: its byte code follows it)
            if writes:
                if not name.startswith("/dev/"):
                    self.spoil(f"wrote {name}")
                return
            self.looked(name, "read")
        elif event in ("os.listdir", "os.scandir"):
            path = args[0]
            if path is None:
                path = "."
            if isinstance(path, int):
                self.spoil("listed a folder by descriptor")
                return
            self.looked(path, "list")
        elif event == "os.mkdir":
            path = args[0]
            if isinstance(path, int) or not (os.path.isdir(path) or _byte_code(os.fsdecode(path))):
                self.spoil(f"made {path!r}")
        elif event in ("os.rename", "os.replace") and _byte_code(os.fsdecode(args[1])):
            pass
        elif event in _SPOILING or event.startswith(_EVENT_PREFIXES):
            self.spoil(event)

    # -- keeping -----------------------------------------------------------------------------------------

    def watched(self) -> list[list[Any]]:
        """[path, how, key] for every path the run looked at and every module file it ran; spoiled (and
        empty) when one changed while it ran or too close before it started to be told apart later."""
        watch: dict[tuple[str, str], Any] = dict(self.seen)
        modules = {os.path.abspath(file) for module in list(sys.modules.values())
                   if isinstance(module, ModuleType) and (file := getattr(module, "__file__", None))}
        for file in modules:  # (probed once, below: what it is now is what the record keeps)
            watch.setdefault((file, "read"), _UNSEEN)
        rows = []
        for (path, how), key in sorted(watch.items()):
            now = _probe(path, how)
            if key is _UNSEEN:
                key = now
            elif now != key:
                self.spoil(f"{path} changed while the run read it")
            elif isinstance(now, list) and isinstance(now[1], int) and now[1] >= self.started_ns - _racy(now[1]):
                self.spoil(f"{path} changed as the run started (its stat could not tell a later change)")
            rows.append([path, how, key])
        return [] if self.spoiled else rows

    def keep(self, code: int) -> bool:
        """Store the record of a qualifying run (exit 0, only reads); False when it did not qualify. With
        TOOLCHAIN_NOOP_DEBUG set, stderr says why a run was not recorded."""
        if code != 0:
            self.spoil(f"exit code {code}")
        watch = [] if self.spoiled else self.watched()
        path = record_path(self.argv)
        if self.spoiled or path is None:
            if os.environ.get(DEBUG) and self.enabled:
                sys.stderr.write(f"toolchain: this run was not recorded: {self.spoiled or 'no working directory'}\n")
            return False
        import json
        from pathlib import Path

        from toolchain.core.fs import atomic_write_text

        atomic_write_text(Path(path), json.dumps({"format": FORMAT, "code": code, "watch": watch, "out": self.out}),
                          mode=0o600)
        _prune(os.path.dirname(path))
        return True


def _prune(folder: str, keep: int = KEEP) -> None:
    """At most `keep` records: the least recently written go (each distinct command line, folder or
    environment has one; a CI runner's temporary folders would make them pile up)."""
    try:
        names = [e for e in os.scandir(folder) if e.name.endswith(".json")]
        if len(names) <= keep:
            return
        names.sort(key=lambda e: e.stat().st_mtime_ns)
        for old in names[:len(names) - keep]:
            os.unlink(old.path)
    except FileNotFoundError:  # (another run pruned the same one)
        pass


def _wrapped(real: Any, recorder: Recorder, how: str) -> Any:
    def stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        local = recorder.local
        if recorder.active and not recorder.spoiled and not local.busy:
            local.busy = True  # (what the recorder itself stats and opens is not the run's)
            try:
                if kwargs.get("dir_fd") is not None:
                    recorder.spoil("looked at a path relative to a descriptor")
                else:
                    recorder.looked(path, "lstat" if kwargs.get("follow_symlinks") is False else how)
            finally:
                local.busy = False
        return real(path, *args, **kwargs)
    return stat


_CURRENT: list[Recorder] = []
_UNSEEN = object()  # (a module file the run did not open itself: its key is taken when the record is kept)


@contextmanager
def live_readings() -> Iterator[None]:
    """Around reads of live figures (free memory, cores: `build.plan.probe_resources`) that decide only what a
    compile does. A run that compiles writes, so it is never recorded; the figures change between any two
    runs, and watching them would leave no warm no-op to answer. Writes and processes inside still count."""
    recorder = _CURRENT[-1] if _CURRENT else None
    if recorder is None:
        yield
        return
    recorder.local.live += 1
    try:
        yield
    finally:
        recorder.local.live -= 1


def _hook(event: str, args: tuple[Any, ...]) -> None:  # audit hooks cannot be removed: one, for all recorders
    if not _CURRENT or (event not in _EVENTS and not event.startswith(_EVENT_PREFIXES)):
        return  # (most events: compile, exec, sys._getframe, ... run through here: the first test is cheap)
    recorder = _CURRENT[-1]
    local = recorder.local
    if recorder.active and not recorder.spoiled and not local.busy:
        local.busy = True
        try:
            recorder.audit(event, args)
        finally:
            local.busy = False


@contextmanager
def recording(argv: Sequence[str]) -> Iterator[Recorder]:
    """Record what the run inside looks at and prints (a no-op when `argv` is not eligible)."""
    recorder = Recorder(argv)
    if not recorder.enabled or sys.stdout is None or sys.stderr is None:
        recorder.spoil("not recorded")
        yield recorder
        return
    import time

    if not getattr(_hook, "installed", False):
        sys.addaudithook(_hook)
        _hook.installed = True  # type: ignore[attr-defined]
    saved = (os.stat, os.lstat, os.access, sys.stdout, sys.stderr)
    os.stat = _wrapped(saved[0], recorder, "stat")
    os.lstat = _wrapped(saved[1], recorder, "lstat")
    os.access = _wrapped(saved[2], recorder, "stat")
    sys.stdout, sys.stderr = _Tee(saved[3], 1, recorder), _Tee(saved[4], 2, recorder)
    recorder.started_ns = time.time_ns()
    recorder.active = True
    _CURRENT.append(recorder)
    try:
        yield recorder
    except BaseException:
        recorder.spoil("stopped")
        raise
    finally:
        recorder.active = False
        _CURRENT.remove(recorder)
        os.stat, os.lstat, os.access = saved[0], saved[1], saved[2]
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = saved[3], saved[4]
