"""Prepared source trees: a checkout of a pinned commit with its patch series applied, reused across builds.

A tree lives at `<cache>/trees/<key>` (key: commit, patches). It is used under its flock; before each use it
is cleaned (`git clean -ffdx`) and checked: HEAD is the commit, the index holds exactly the patched state,
and the working tree matches the index (the first use checks each, and records the tree's `git status` that
later uses compare with). Anything else (a build killed half-way that edited tracked files, a hand edit)
makes it be prepared again from the mirror.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from toolchain.core.fs import atomic_write_text, file_lock, sha256_bytes
from toolchain.core.git import git
from toolchain.recipe.model import Patch
from toolchain.sources.mirrors import DESCRIBE_ABBREV, Mirrors
from toolchain.sources.patches import apply_series, materialize

# What a prepared tree is besides its commit and patches: trees made before a change here are not reused.
TREE_FORMAT = f"abbrev={DESCRIBE_ABBREV}"


class SourceTrees:
    def __init__(self, cache_dir: Path, mirrors: Mirrors) -> None:
        self.root = Path(cache_dir) / "trees"
        self.mirrors = mirrors

    @staticmethod
    def key(commit: str, patches: tuple[Patch, ...], subdir: str) -> str:
        return sha256_bytes(json.dumps([commit, subdir, [p.sha256 for p in patches], TREE_FORMAT]).encode())[:24]

    @contextlib.contextmanager
    def tree(self, url: str, commit: str, patches: tuple[Patch, ...] = (), *, subdir: str = "",
             what: str = "", log: Path | None = None, fresh: bool = False) -> Iterator[Path]:
        key = self.key(commit, patches, subdir)
        path = self.root / key
        state = self.root / f"{key}.state"
        with file_lock(self.root / f"{key}.lock"):
            if fresh or not self._usable(path, state, commit):
                self._prepare(url, commit, patches, subdir, what, path, state, log)
            yield path

    def _usable(self, path: Path, state: Path, commit: str) -> bool:
        if not (path / ".git").exists() or not state.is_file():
            return False
        expected = json.loads(state.read_text())
        if expected["commit"] != commit:
            return False
        # One `git status` (HEAD, index, working tree, untracked and ignored files) that reads exactly as it
        # did when the tree was prepared means nothing touched it. After a build it differs by what the build
        # left (build/, *.egg-info): those are cleaned away, and the same status again means the tracked
        # state is untouched (its lines carry the index's object names, and HEAD's).
        if expected.get("status") is not None:
            if _status(path) == expected["status"]:
                return True
            git(["clean", "-ffdxq"], cwd=path, check=False)
            return _status(path) == expected["status"]
        # First use after preparing: the whole check, then its status is recorded for the uses after it. (Not
        # recorded when prepared: files written in the same second as the index are re-read by the next
        # `git status`, which would cost every first checkout a second read of every file.)
        git(["clean", "-ffdxq"], cwd=path, check=False)
        head = git(["rev-parse", "HEAD"], cwd=path, check=False).stdout.strip()
        staged = git(["diff", "--cached", "--binary", "HEAD"], cwd=path, check=False)
        if not (head == commit and sha256_bytes(staged.stdout.encode()) == expected["staged"]):
            return False
        status = _status(path)  # (also refreshes the index: the stat data of files is trusted from now on)
        if status is None or git(["diff", "--quiet"], cwd=path, check=False).returncode != 0:
            return False
        atomic_write_text(state, json.dumps({**expected, "status": status}))
        return True

    def _prepare(self, url, commit, patches, subdir, what, path: Path, state: Path, log) -> None:
        state.unlink(missing_ok=True)
        for stale in self.root.glob(f".tmp-{path.name}-*"):  # a killed preparer's (we hold the key's lock)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = self.root / f".tmp-{path.name}-{os.urandom(4).hex()}"
        try:
            files = [materialize(p, self.mirrors, self.root.parent) for p in patches]
            self.mirrors.checkout(url, commit, tmp)
            staged = ""  # a fresh checkout has nothing staged
            if patches:
                apply_series(patches, files, tmp, subdir=subdir, what=what or f"{url}@{commit[:12]}", log=log)
                git(["add", "-A"], cwd=tmp)
                staged = git(["diff", "--cached", "--binary", "HEAD"], cwd=tmp).stdout
            shutil.rmtree(path, ignore_errors=True)
            tmp.rename(path)
            # The clone's alternates point at the mirror by absolute path; the tree moves, the mirror doesn't.
            atomic_write_text(state, json.dumps({"commit": commit, "staged": sha256_bytes(staged.encode())}))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _status(tree: Path) -> str | None:
    r = git(["status", "--porcelain=v2", "--branch", "--untracked-files=all", "--ignored=matching"], cwd=tree,
            check=False)
    return r.stdout if r.returncode == 0 else None
