"""The one rule for what is read from the cache (wheel entries and their entry.json, native and closure
records, remembered probes, kept file copies, bisect's unbuildable records), like ssh's StrictModes and git's
`safe.directory`. A file is trusted only when it is

- a regular file, opened without following a final symbolic link and without blocking (a FIFO is a miss,
  never a hang; the checks below are made on the opened descriptor, so it cannot be swapped in between);
- owned by this user or root;
- writable by nobody else: not group- or other-writable, unless the cache is declared shared (`[cache]
  shared-group =` in a recipe, or `$TOOLCHAIN_CACHE_SHARED_GROUP`): then writable by that group and nobody
  else, and owned by this user, root or a member of that group.

- in a folder that is itself trusted, as is each folder above it up to `/` (`folder_problem`, the walk ssh's
  StrictModes makes): a folder of this user's or root's that no one else can write (a sticky one of this user's
  or root's, as /tmp, or one the declared shared group can write); a symbolic link on the way must be this
  user's or root's, and the folder it names is walked the same way. Whoever can write a folder on the way can
  rename or swap the files in it, whoever owns them. A cache whose root (or a folder directly in it) fails is
  untrusted as a whole for the run, decided once, here (`cache_for_run`, which every cache path of the run goes through: mirrors, source
  trees, ccache, work/, memo, kept files, repro and image folders): nothing in it is read, run or written; the
  run uses a private fresh folder of its own instead (`build/cache.shared_folder_warnings` says so once, with
  the fix).

A record the cache serves (a remembered probe, a wheel entry's entry.json, a closure, a native record) also
carries its own key and the sha256 of its content (`sealed`, `read_sealed`; the checksum, its last key, is that
of the text before it, checked on the bytes read): a record renamed over another's, or edited, is a miss like a
planted one.

Anything else is `Untrusted` (an OSError): the caller treats it as a miss (re-probed, rebuilt, resolved again),
never serves it. A cache other people can write to is shared through the OCI registry, where entries are
verified by digest (sharing/registry.py), not through a folder. The out folder's own files (its marker, pylock.toml)
are opened the same safe way (`fs.open_regular`: no link, no FIFO), not asked who owns them: under sudo the
out folder is handed to the user who ran it (`fs.give_to_invoking_user`).
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from toolchain.core.fs import NotRegular, invoking_user, open_regular, sha256_bytes
from toolchain.core.group import member, shared_group

T = TypeVar("T")


class Untrusted(OSError):
    """A file read from the cache or the out folder that the trust rule refuses (why: the message)."""


def keep_writes_private() -> None:
    """What this process creates is writable by nobody else, whatever the umask it was given (002 would make
    the cache's own folders group-writable: the rule refuses them, and the whole cache would be untrusted).
    A folder a group shares on purpose gets its group's write bit from its owner (`chmod g+w`, a setgid
    folder), not from this process's umask."""
    os.umask(os.umask(0o022) | 0o022)


def problem(st: os.stat_result, *, folder: bool = False, shared: bool = True, invoker: bool = False) -> str:
    """Why a file (or, with `folder`, a folder) of this stat is not trusted ("" when it is); without `shared`,
    the declared shared group is no excuse (what is run, not read: a recipe); with `invoker`, a file of the user
    who ran sudo is theirs too (a file of the out folder, which a run under sudo hands to them: the build
    record, `lock.buildrecord.record_bytes`)."""
    if not (stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)):
        return "not a folder" if folder else "not a regular file"
    me, group = os.geteuid(), (shared_group() if shared else None)
    if invoker and st.st_uid == invoking_user()[0]:
        me = st.st_uid
    if folder and st.st_mode & stat.S_ISVTX and st.st_uid in (me, 0):
        return ""  # a sticky folder of this user's (or root's): others may add files, not replace ours
    if group is not None and st.st_gid == group:
        if st.st_mode & 0o002:
            return f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
        if st.st_uid not in (me, 0) and not member(st.st_uid, group):
            return f"owned by uid {st.st_uid}, not of the shared group {group}"
        return ""
    if st.st_uid not in (me, 0):
        return f"owned by uid {st.st_uid}"
    if st.st_mode & 0o022:
        return f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


_FOLDERS: dict[tuple[str, bool], str] = {}  # a folder's verdict (folder_problem), kept for the run


def forget_folders() -> None:
    """Forget the folder verdicts kept for this run (a folder's owner changed its mode: tests, a long process)."""
    _FOLDERS.clear()


def folder_problem(folder: str | os.PathLike[str], *, shared: bool = True) -> str:
    """Why a record in `folder` is not trusted for where it lies ("" when it is): `folder` and every folder
    above it up to `/`, as ssh's StrictModes walks a path, must pass `problem(folder=True)`; a symbolic link on
    the way must be this user's or root's, and the folder it names is walked the same way. One lstat per
    folder, each verdict kept for the run; FileNotFoundError when a folder on the way is absent."""
    path = os.path.abspath(folder)
    key = (path, shared)
    if key in _FOLDERS:
        return _FOLDERS[key]
    parent = os.path.dirname(path)
    why = folder_problem(parent, shared=shared) if parent != path else ""
    if not why:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise  # (absent: nothing in it to read; not kept, it may be made later in the run)
        except OSError as exc:
            return f"{path} cannot be read ({exc.strerror})"
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (os.geteuid(), 0):
                why = f"{path} is a symbolic link of uid {st.st_uid}"
            else:
                real = os.path.realpath(path)
                why = folder_problem(real, shared=shared) if real != path else f"{path} is a link loop"
        else:
            why = problem(st, folder=True, shared=shared)
            why = f"{path} is {why}" if why else ""
    _FOLDERS[key] = why
    return why


_STAND_INS: dict[str, tuple[str, str]] = {}  # a private cache folder -> (the untrusted cache it stands in for, why)
_CHOSEN: dict[str, str] = {}  # an untrusted cache root (as named, absolute) -> the private folder standing in for it


CACHE_ENV = "TOOLCHAIN_CACHE_DIR"


def default_cache_dir() -> Path:
    """The tool's cache folder when no --cache-dir is given: $TOOLCHAIN_CACHE_DIR, else the XDG cache's."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "xpu-toolchain"


def cache_root(given: Path | str | None = None) -> Path:
    """The cache folder this run uses: `given`, else `default_cache_dir()`, when the trust rule accepts it,
    else the run's private folder standing in for it (`cache_for_run`, the one place that decides)."""
    return cache_for_run(Path(given) if given else default_cache_dir())


def cache_for_run(root: Path) -> Path:
    """The folder this run uses as the cache `root`: `root` itself when it (or, absent, the nearest folder above
    it) passes `folder_problem` and so does each folder directly in it (`git/`, `trees/`, `ccache/`, `work/`,
    `memo/`...: a link there is the owner's own, warned of); otherwise a private, fresh folder standing in for it
    for the whole run (made with mkdtemp: this user's, mode 0700, marked as the tool's and removed at exit
    through `core.owned`), the same one each time `root` is asked for. Nothing under an untrusted cache is read,
    run or written: every cache path derives from what this returns. A private folder passed back in is
    returned as it is. One walk and one listing of the cache per run (`first_look` hands them on)."""
    path = os.path.abspath(os.path.expanduser(root))
    if path in _STAND_INS or path in _TRUSTED:
        return Path(root)
    if path in _CHOSEN:
        return Path(_CHOSEN[path])
    if os.path.lexists(path) and not os.path.isdir(path):
        return Path(root)  # (not a folder at all: bad input, refused where the cache folder is checked, exit 2)
    why, children = _cache_problem(path)
    if why:
        return _stand_in(path, why)
    _TRUSTED.add(path)
    _FRESH[path] = children
    return Path(root)


def _cache_problem(path: str) -> tuple[str, list[tuple[str, os.stat_result]]]:
    """Why the cache `path` is not trusted as a whole ("" when it is: `cache_for_run`), and what lies in it."""
    why = _root_problem(path)
    if why:
        return why, []
    try:
        children = cache_children(path)
    except OSError as exc:
        return f"{path} cannot be listed ({exc.strerror})", []
    return next((f"{name} is {w}" for name, st in children
                 if not stat.S_ISLNK(st.st_mode) and (w := problem(st, folder=True))), ""), children


_TRUSTED: set[str] = set()  # cache roots `cache_for_run` found trusted this run
_FRESH: dict[str, list[tuple[str, os.stat_result]]] = {}  # ... and what it found in them, not yet handed on


def cache_children(root: str | os.PathLike[str]) -> list[tuple[str, os.stat_result]]:
    """Each name directly in the cache `root` with its lstat (one listing); [] when `root` is absent."""
    found = []
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    for entry in entries:
        with contextlib.suppress(OSError):
            found.append((entry.name, entry.stat(follow_symlinks=False)))
    return sorted(found)


def first_look(root: Path) -> list[tuple[str, os.stat_result]] | None:
    """Before the run's one look at the cache `root`: what `cache_for_run` just found in it (its folder verdicts
    kept: a warm run walks it once), else None, the verdicts kept forgotten (what its owner changed is seen)."""
    kept = _FRESH.pop(os.path.abspath(root), None)
    if kept is None:
        forget_folders()
    return kept


def _root_problem(path: str) -> str:
    """folder_problem of the cache root, or of the nearest folder above it when it does not exist yet."""
    while True:
        try:
            return folder_problem(path)
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if parent == path:
                return ""
            path = parent


STAND_IN_PREFIX = "xpu-toolchain-cache-"  # a private cache's name in the temporary folder (mkdtemp)
STAND_IN_OWNER = ".toolchain-stand-in"  # in it: core.proc.owner.owner_token() of the run that made it


def _stand_in(root: str, why: str) -> Path:
    import atexit
    import tempfile

    from toolchain.core import owned
    from toolchain.core.fs import atomic_write_text
    from toolchain.core.proc.owner import owner_token

    reap_stand_ins()  # (what runs killed before their exit left)
    area = tempfile.mkdtemp(prefix=STAND_IN_PREFIX)  # (mode 0700, this user's)
    problem_there = folder_problem(area)
    if problem_there:
        os.rmdir(area)
        from toolchain.errors import UsageError

        raise UsageError(f"cache folder {root} is not trusted ({why}), and the temporary folder for a private "
                         f"cache is not either: {problem_there}",
                         hint="set TMPDIR to a folder of yours that no one else can write, or fix the cache "
                              f"folder (chmod -R go-w {root}; chown -R $USER)")
    owned.mark(Path(area))
    atomic_write_text(Path(area) / STAND_IN_OWNER, owner_token() + "\n")  # (last: what reap_stand_ins needs)
    _STAND_INS[area], _CHOSEN[root] = (root, why), area
    atexit.register(_remove_stand_in, area)
    return Path(area)


def _remove_stand_in(area: str) -> None:
    from toolchain.core import owned
    from toolchain.errors import UsageError

    with contextlib.suppress(OSError, UsageError):  # (at exit: what cannot go stays in the temporary folder)
        owned.remove_ours(Path(area), "the run's private cache folder")


def reap_stand_ins(*, dry_run: bool = False) -> list[Path]:
    """Remove the private caches (`cache_for_run`) that runs killed before their exit (SIGKILL: no atexit) left
    in the temporary folder; what was removed (`dry_run`: what would be). Only a folder of this user's, named
    as the tool names them, holding the tool's marker and an owner record of this user's (`STAND_IN_OWNER`,
    read as the cache's records are) whose process has ended (`owner_gone`: the same boot, and that pid not the
    process that started then). Never a folder without them, one of another uid, one whose owner still runs,
    or one made on another boot (its owner is not known to be gone: the folder may be another machine's)."""
    import tempfile

    from toolchain.core import owned
    from toolchain.core.proc.owner import owner_gone
    from toolchain.errors import UsageError

    tmp = tempfile.gettempdir()
    try:
        names = sorted(n for n in os.listdir(tmp) if n.startswith(STAND_IN_PREFIX))
    except OSError:
        return []
    gone = []
    for name in names:
        area = Path(tmp) / name
        try:
            st = os.lstat(area)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            token = read_trusted(area / STAND_IN_OWNER).decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            continue  # (no owner record of this user's: not known to be the tool's, or being made)
        if not owner_gone(token) or owned.refusal(area):
            continue
        if not dry_run:
            try:
                owned.remove_ours(area, "a private cache a killed run left")
            except (OSError, UsageError):
                continue  # (not the tool's after all, or removed by another run at once)
        gone.append(area)
    return gone


def stands_in_for(cache: Path) -> tuple[str, str] | None:
    """(the untrusted cache root, why) when `cache` is a private folder `cache_for_run` gave in its place."""
    return _STAND_INS.get(os.path.abspath(cache))


def cache_for_recipe(cache: Path) -> Path:
    """`cache` again once the run's recipe declared its shared group (`declare_shared_group`): the cache a
    private folder stands in for when that group makes it trusted after all (`cache` otherwise)."""
    stand_in = _STAND_INS.get(os.path.abspath(cache))
    if stand_in is None or shared_group() is None:
        return cache
    root = stand_in[0]
    forget_folders()
    if _cache_problem(root)[0]:
        return cache
    del _CHOSEN[root]
    return Path(root)


@contextmanager
def open_trusted(path: Path) -> Iterator[io.BufferedReader]:
    """`path` opened for reading when the rule trusts it (its folders first: `folder_problem`; then the file,
    checked on the opened descriptor: `open_regular`), else Untrusted; FileNotFoundError when absent."""
    where = folder_problem(os.path.dirname(os.path.abspath(path)))
    if where:
        raise Untrusted(f"{path} is not trusted: {where}")
    try:
        with open_regular(path) as (fh, st):
            why = problem(st)
            if why:
                raise Untrusted(f"{path} is not trusted: {why}")
            yield fh
    except NotRegular as exc:
        raise Untrusted(str(exc)) from None


def read_trusted(path: Path) -> bytes:
    """The bytes of `path` when the rule trusts it, else Untrusted (a symbolic link: ELOOP, an OSError too)."""
    with open_trusted(path) as fh:
        return fh.read()


RACY_NS = 50_000_000  # git's racily-clean margin: a file system stamps a ctime from a clock that lags behind
_KEPT: dict[tuple[str, Callable[[Path, bytes], Any]], tuple[tuple[int, ...], Any]] = {}  # (path, parse) -> (file, what)


def read_kept(path: Path, parse: Callable[[Path, bytes], T]) -> T:
    """`parse(path, read_trusted(path))`, the file checked as `read_trusted` checks it every time; what `parse` made of
    it (a pure function of the bytes: give back nothing a caller may change) is kept for the run and given
    again while the opened file is the same one unchanged (device, inode, size, mtime and ctime), its ctime
    older than the first read less RACY_NS (as git trusts a racily clean entry: a file changed after the first
    read has a later ctime). A warm build reads some records twice: a cache entry looked up, then taken."""
    with open_trusted(path) as fh:
        st = os.fstat(fh.fileno())
        ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        kept = _KEPT.get((str(path), parse))
        if kept is not None and kept[0] == ident:
            found: T = kept[1]
            return found
        raw = fh.read()
    value = parse(path, raw)
    if st.st_ctime_ns < time.time_ns() - RACY_NS:
        _KEPT[(str(path), parse)] = (ident, value)
    return value


def read_json(path: Path) -> object:
    """The JSON document in `path` when the rule trusts it; None for a miss (absent, untrusted, not JSON)."""
    import json

    try:
        return json.loads(read_trusted(path).decode("utf-8"))
    except (OSError, ValueError):
        return None


RECORD_KEY, RECORD_SHA = "sealed-key", "sealed-sha256"  # (top-level keys of a sealed record; RECORD_SHA last)
_SEAL = f', "{RECORD_SHA}": "'.encode()  # between a sealed record's text and its checksum (then `"}`)


def sealed(key: str, data: Mapping[str, object], *, indent: int | None = 1) -> str:
    """The JSON text of a record the cache will serve under `key`: `data` with the key it is filed under and,
    as its last key, the sha256 of the text before it (`unseal` checks both on the bytes read: no second
    serialization of what it reads)."""
    import json

    text = json.dumps({**data, RECORD_KEY: key}, indent=indent, sort_keys=True)  # (ASCII: ensure_ascii)
    head = text[:-1].rstrip()  # (without its closing brace)
    return f'{head}{_SEAL.decode()}{sha256_bytes(head.encode())}"}}'


def unseal(raw: bytes | str, key: str) -> dict[str, Any] | None:
    """The record's data when `raw` is the text `sealed` made under `key`, unchanged since (the sha256 of the
    text before its checksum holds), else None: a record renamed over another's, or edited, is a miss."""
    return _data(_sealed_text(raw.encode() if isinstance(raw, str) else raw), key)


def _sealed_text(raw: bytes) -> bytes | None:
    """`raw` (its trailing white space left out) when the checksum at its end holds, else None."""
    body = raw.rstrip()
    at = body.rfind(_SEAL)
    if at < 0 or len(body) != at + len(_SEAL) + 66 or not body.endswith(b'"}'):
        return None
    if body[at + len(_SEAL):-2] != sha256_bytes(body[:at]).encode():
        return None
    return body


def _sealed_file(path: Path, raw: bytes) -> bytes | None:
    return _sealed_text(raw)


def _data(body: bytes | None, key: str) -> dict[str, Any] | None:
    """The data of a sealed text whose checksum holds (`_sealed_text`) when it was sealed under `key`."""
    import json

    if body is None:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.pop(RECORD_KEY, None) != key:
        return None
    data.pop(RECORD_SHA, None)
    return data


def read_sealed(path: Path, key: str) -> dict[str, Any] | None:
    """The record in `path` when the rule trusts the file and it was `sealed` under `key` unchanged; None for a
    miss (absent, untrusted, not JSON, another key, edited). Its checksum is checked once a run while the file
    stays the same (`read_kept`); its JSON is read each time (the caller's to change)."""
    try:
        return _data(read_kept(path, _sealed_file), key)
    except OSError:
        return None
