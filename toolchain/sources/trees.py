"""Prepared source trees: a checkout of a pinned commit with its patch series applied, reused across builds.

A tree lives at `<cache>/trees/<key>` (key: commit, patches). It is used under its flock; before each use it
is checked: HEAD is the commit, the index holds exactly the patched state, and the working tree matches the
index (the first use checks each, and records the tracked part of the tree's `git status` that later uses
compare with), and it is cleaned of what git does not track (what the last build left). Anything else (a
build killed half-way that edited tracked files, a hand edit) makes it be prepared again from the mirror.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from toolchain.core.fs import atomic_write_text, file_lock, sha256_bytes
from toolchain.core.git import git
from toolchain.recipe.model import Patch
from toolchain.sources.mirrors import DESCRIBE_ABBREV, Mirrors
from toolchain.sources.patches import apply_series, materialize

# What a prepared tree is besides its commit and patches: trees made before a change here are not reused.
TREE_FORMAT = f"abbrev={DESCRIBE_ABBREV}"
READ_TRIES = 3  # a reader's tries to find the tree ready under the shared lock (then it holds it alone)


class SourceTrees:
    """Source trees checked out from the mirrors at a commit with patches applied, kept in the cache."""
    def __init__(self, cache_dir: Path, mirrors: Mirrors) -> None:
        self.root = Path(cache_dir) / "trees"
        self.mirrors = mirrors
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    @staticmethod
    def key(commit: str, patches: tuple[Patch, ...], subdir: str) -> str:
        """The cache key of a tree: its commit, subdir and patches (by sha256) and the tree format."""
        return sha256_bytes(json.dumps([commit, subdir, [p.sha256 for p in patches], TREE_FORMAT]).encode())[:24]

    @contextlib.contextmanager
    def tree(self, url: str, commit: str, patches: tuple[Patch, ...] = (), *, subdir: str = "",
             what: str = "", log: Path | None = None, fresh: bool = False, read: bool = False) -> Iterator[Path]:
        """The checked-out, patched tree of `url` at `commit`, made once and kept while the block uses it.
        `read`: the block only reads it (a FetchContent source: its build goes to the build's own folder), so
        it holds the tree's lock shared, beside every other reader (the builds of a bisect, each a commit of
        the component, all read the same dependency trees: an exclusive hold made each wait for the others'
        whole builds); a tree to prepare or to clean of what a build left is made ready under the exclusive
        lock first, then read under the shared one."""
        key = self.key(commit, patches, subdir)
        path = self.root / key
        state = self.root / f"{key}.state"
        lock = self.root / f"{key}.lock"
        for _ in range(READ_TRIES if read and not fresh else 0):
            with file_lock(lock, shared=True):
                if self._usable(path, state, commit, discard=False):
                    yield path
                    return
            with file_lock(lock):  # not ready (or a build left something in it): readied alone, then read
                if not self._usable(path, state, commit):
                    self._prepare(url, commit, patches, subdir, what, path, state, log)
        with file_lock(lock):
            prepared = fresh or not self._usable(path, state, commit)
            if prepared:
                self._prepare(url, commit, patches, subdir, what, path, state, log)
            yield path
        if prepared:
            self._later(self._settle, path, state, commit, lock)

    def _settle(self, path: Path, state: Path, commit: str, lock: Path) -> None:
        """The check the first reuse of a tree makes (its first `git status` re-reads every file checked out in
        the index's second, then the status is recorded for later reuses to compare with), made when the build
        that prepared the tree ends, beside the rest of that build, under the tree's lock like any use. What
        the build left is moved out too. A tree the build broke is left for the next use to prepare again."""
        with contextlib.suppress(Exception), file_lock(lock):  # (a failure here: the next use checks whole)
            self._usable(path, state, commit)

    def _later(self, work: Callable[..., object], *args: object) -> None:
        """`work(*args)` in a thread beside the build (the process waits for it before it exits)."""
        thread = threading.Thread(target=work, args=args, name="trees-later")
        with self._lock:  # (started under the lock: `settled` never sees it listed and not yet started)
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    def settled(self) -> None:
        """Wait for the work started beside builds (settling prepared trees, deleting what builds left),
        including what that work started in turn (settling a tree moves what a build left out of it, and a
        thread of its own deletes that)."""
        while True:
            with self._lock:
                threads = [t for t in self._threads if t.is_alive()]
            if not threads:
                return
            for thread in threads:
                thread.join()

    def _usable(self, path: Path, state: Path, commit: str, *, discard: bool = True) -> bool:
        """Whether the tree at `path` is `commit`'s as prepared; what git does not track in it is moved out
        (`discard`), else (a reader's check, under the shared lock) makes it not usable as it is."""
        if not (path / ".git").exists() or not state.is_file():
            return False
        expected = json.loads(state.read_text())
        if expected["commit"] != commit:
            return False
        # One `git status` (HEAD, index, working tree, and what is untracked or ignored). The first use after
        # preparing checks what it says: HEAD is the commit, the index holds exactly what the preparation
        # staged (by object names) and the working tree matches the index; its tracked part is recorded. A
        # later use only compares the tracked part with that record. What is untracked or ignored (what a
        # build leaves: build/, *.egg-info, byte code) is moved out of the tree, as `git clean -ffdx` would
        # remove it, and deleted beside the build instead of before it.
        tracked, extra = _scan(path)
        if tracked is None:
            return False
        if expected.get("status") is not None:
            if tracked != expected["status"]:
                return False
        elif "index" not in expected or not _is_prepared_state(tracked, commit, expected["index"]):
            return False
        else:  # (not recorded when prepared: the status after a checkout re-reads every file written in the
            # same second as the index, which would cost every first checkout a second read)
            atomic_write_text(state, json.dumps({**expected, "status": tracked}))  # (readers write the same)
        if extra and not discard:
            return False
        self._discard(path, extra)
        return True

    def _discard(self, tree: Path, paths: list[str]) -> None:
        """Move `paths` (relative to `tree`) out of it at once; a thread deletes them while the build runs
        (the process waits for it before it exits). A folder left by a killed process is deleted by the next
        one that discards."""
        if not paths:
            return
        trash = self.root / f"{TRASH}{os.getpid()}-{os.urandom(4).hex()}"
        trash.mkdir()
        for i, rel in enumerate(_outermost(paths)):
            os.rename(tree / rel, trash / str(i))
        stale = [p for p in self.root.glob(f"{TRASH}*") if not _alive(p.name[len(TRASH):].split("-")[0])]
        self._later(_delete, [trash, *stale])

    def _prepare(self, url: str, commit: str, patches: tuple[Patch, ...], subdir: str, what: str, path: Path,
                 state: Path, log: Path | None) -> None:
        state.unlink(missing_ok=True)
        for stale in self.root.glob(f".tmp-{path.name}-*"):  # a killed preparer's (we hold the key's lock)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = self.root / f".tmp-{path.name}-{os.urandom(4).hex()}"
        try:
            files = [materialize(p, self.mirrors, self.root.parent) for p in patches]
            self.mirrors.checkout(url, commit, tmp)
            index: list[str] = []  # a fresh checkout has nothing staged
            if patches:
                apply_series(patches, files, tmp, subdir=subdir, what=what or f"{url}@{commit[:12]}", log=log)
                git(["add", "-A"], cwd=tmp)
                index = _staged(tmp)
            shutil.rmtree(path, ignore_errors=True)
            tmp.rename(path)
            # The clone's alternates point at the mirror by absolute path; the tree moves, the mirror doesn't.
            atomic_write_text(state, json.dumps({"commit": commit, "index": index}))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


TRASH = ".trash-"  # <trees>/.trash-<pid>-<random>: what reuses moved out of trees, being deleted


def _scan(tree: Path) -> tuple[str | None, list[str]]:
    """(the tracked part of the tree's `git status`, or None when git fails; the untracked and ignored
    paths, a folder once when all of it is)."""
    r = git(["status", "--porcelain=v2", "-z", "--branch", "--no-renames", "--untracked-files=normal",
             "--ignored=traditional"], cwd=tree, check=False)
    if r.returncode != 0:
        return None, []
    tracked, extra = [], []
    fields = iter(r.stdout.split("\0"))
    for entry in fields:
        if entry[:2] in ("? ", "! "):
            extra.append(entry[2:])
        elif entry:
            tracked.append(entry)
    return "\n".join(tracked), extra


def _staged(tree: Path) -> list[str]:
    """What the index holds besides HEAD, one "X mode-in-HEAD mode-in-index object-in-HEAD object-in-index
    path" a path (what `git status --porcelain=v2` says of a staged path)."""
    raw = git(["diff", "--cached", "--raw", "-z", "--no-abbrev", "--no-renames", "HEAD"], cwd=tree).stdout
    fields = raw.split("\0")
    out = []
    for head, path in zip(fields[0::2], fields[1::2], strict=False):
        m_head, m_index, o_head, o_index, x = head.lstrip(":").split()
        out.append(f"{x} {m_head} {m_index} {o_head} {o_index} {path}")
    return sorted(out)


def _is_prepared_state(tracked: str, commit: str, index: list[str]) -> bool:
    """Whether a tree's tracked status says: HEAD is `commit` (detached), nothing differs between the index
    and the working tree, and the index differs from HEAD by exactly `index` (see `_staged`)."""
    staged = []
    oid = ""
    for line in tracked.split("\n"):
        if line.startswith("# branch.oid "):
            oid = line.split()[2]
        elif line.startswith("1 "):  # 1 XY sub mH mI mW hH hI path
            _, xy, _sub, m_head, m_index, _m_work, o_head, o_index, path = line.split(" ", 8)
            if xy[1] != ".":
                return False  # the working tree differs from the index
            staged.append(f"{xy[0]} {m_head} {m_index} {o_head} {o_index} {path}")
        elif not line.startswith("# "):
            return False  # unmerged, or anything else
    return oid == commit and sorted(staged) == index


def _outermost(paths: list[str]) -> list[str]:
    """`paths` without those inside a folder listed too (git lists an untracked folder, then the ignored
    files in it)."""
    kept: list[str] = []
    folder = None  # the last folder kept: sorted, what is inside it follows it
    for rel in sorted(paths):
        if folder is not None and rel.startswith(folder):
            continue
        kept.append(rel)
        folder = rel if rel.endswith("/") else folder
    return kept


def _alive(pid: str) -> bool:
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _delete(folders: list[Path]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
