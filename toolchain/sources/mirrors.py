"""Sources: a mirror cache (one bare repository per URL, full history and tags) and cheap checkouts.

A mirror is fetched only when the pinned commit is missing. `--mirror FROM=TO` rewrites URL prefixes
(air-gapped sites, tests); the cache is keyed by the recipe's URL, so a rewrite does not change it.
Checkouts are prepared source trees keyed by (commit, patches) and reused after a cleanliness check.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from toolchain.core.fs import file_lock, sha256_bytes
from toolchain.core.git import commit_id, git
from toolchain.core.proc import CommandFailed
from toolchain.errors import SourceError, UsageError

# `git describe` as setuptools-scm runs it in a tree (`--tags --long --match *[0-9]*`), with the abbreviation
# pinned: git's default grows with the object count, so a mirror holding pull refs gave g1234567 where a lean
# one gave g123456. Prepared trees get the same length as `core.abbrev`, so the version setuptools-scm
# computes inside a tree names the same abbreviation as the lock's `describe`.
DESCRIBE_ABBREV = 12
DESCRIBE_ARGS = ("--tags", "--long", f"--abbrev={DESCRIBE_ABBREV}", "--match", "*[0-9]*")
DESCRIBE_RULE = f"git describe {' '.join(DESCRIBE_ARGS)}; source trees: core.abbrev={DESCRIBE_ABBREV}"


@dataclass(frozen=True)
class Rewrite:
    prefix: str
    replacement: str


def parse_rewrites(pairs: Sequence[str]) -> tuple[Rewrite, ...]:
    out = []
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"--mirror {pair!r}: expected FROM=TO", hint="e.g. --mirror https://github.com/=file:///srv/git/")
        a, b = pair.split("=", 1)
        if not a or not b:
            raise UsageError(f"--mirror {pair!r}: FROM and TO must both be non-empty")
        out.append(Rewrite(a, as_url(b)))
    return tuple(out)


def as_url(target: str) -> str:
    if "://" in target or target.startswith("git@"):
        return target
    path = os.path.abspath(target)
    return "file://" + path + ("/" if target.endswith("/") else "")


def rewrite_url(url: str, rewrites: Sequence[Rewrite]) -> str:
    """The longest matching prefix wins; of equal ones the later (`--mirror` comes after the recipe's)."""
    best = max((r for r in reversed(rewrites) if url.startswith(r.prefix)), key=lambda r: len(r.prefix),
               default=None)
    return best.replacement + url[len(best.prefix):] if best else url


def _slug(url: str) -> str:
    tail = re.sub(r"\.git$", "", url.rstrip("/")).rsplit("/", 2)[-2:]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(tail)).strip("-") or "repo"
    return f"{name}-{sha256_bytes(url.encode())[:12]}"


class Mirrors:
    """The mirror cache under `<cache>/git/`. Safe for concurrent users (one flock per mirror)."""

    def __init__(self, cache_dir: Path, rewrites: Sequence[Rewrite] = (), log_dir: Path | None = None,
                 ui=None) -> None:
        self.root = Path(cache_dir) / "git"
        self.rewrites = tuple(rewrites)
        self.log_dir = log_dir
        self.ui = ui

    def path(self, url: str) -> Path:
        return self.root / f"{_slug(url)}.git"

    def _log(self, url: str) -> Path | None:
        return self.log_dir / f"git-{_slug(url)}.log" if self.log_dir else None

    def has_commit(self, url: str, commit: str) -> bool:
        mirror = self.path(url)
        if not (mirror / "HEAD").exists():
            return False
        r = git(["cat-file", "-e", f"{commit}^{{commit}}"], git_dir=mirror, check=False)
        return r.returncode == 0

    def ensure(self, url: str, commit: str | None = None, *, where: str = "") -> Path:
        """The mirror of `url`, fetched if `commit` (or, with None, anything) is missing."""
        mirror = self.path(url)
        if commit and self.has_commit(url, commit):
            return mirror
        with file_lock(mirror.with_suffix(".lock")):
            if commit and self.has_commit(url, commit):
                return mirror
            self._fetch(url, mirror)
            if commit and not self.has_commit(url, commit):
                fetched = rewrite_url(url, self.rewrites)
                raise SourceError(
                    f"{where + ': ' if where else ''}commit {commit} is not in {url}"
                    + (f" (fetched from {fetched})" if fetched != url else ""),
                    hint="check the pinned `commit` (was the branch force-pushed?), or run "
                         "`toolchain update --recipe ...` to pin the current head of `ref`")
        return mirror

    def _fetch(self, url: str, mirror: Path) -> None:
        source = rewrite_url(url, self.rewrites)
        log = self._log(url)
        if self.ui:
            self.ui.step(f"fetching {url}" + (f" via {source}" if source != url else ""))
        if not (mirror / "HEAD").exists():
            for stale in mirror.parent.glob(f".tmp-{mirror.name}-*"):  # a killed fetcher's (we hold the lock)
                shutil.rmtree(stale, ignore_errors=True)
            tmp = mirror.with_name(f".tmp-{mirror.name}-{os.getpid()}")
            tmp.parent.mkdir(parents=True, exist_ok=True)
            git(["init", "--bare", "--quiet", str(tmp)], log=log)
            git(["config", "remote.origin.url", source], git_dir=tmp)
            git(["config", "gc.auto", "0"], git_dir=tmp)
            os.rename(tmp, mirror)  # an empty mirror is valid; the fetch below fills it
        else:
            git(["config", "remote.origin.url", source], git_dir=mirror)
        try:
            git(["fetch", "--progress", "--prune", "--force", "origin", "+refs/heads/*:refs/heads/*",
                 "+refs/tags/*:refs/tags/*"], git_dir=mirror, log=log, capture=False)
        except CommandFailed as exc:
            raise SourceError(f"cannot fetch {url}" + (f" (from {source})" if source != url else "")
                              + f": git exited with {exc.returncode}\n{exc.tail}",
                              hint="check the URL and your network, or map it to a local mirror with "
                                   "--mirror FROM=TO (or [mirrors] in the recipe)") from None

    def resolve(self, url: str, ref: str) -> str:
        """The commit a branch, tag or commit-ish points at now (fetches first)."""
        mirror = self.ensure(url, None)
        for candidate in (f"refs/heads/{ref}", f"refs/tags/{ref}", ref):
            sha = commit_id(mirror, candidate)
            if sha:
                return sha
        raise SourceError(f"ref {ref!r} not found in {url}", hint="set `ref` to a branch or tag the repository has")

    def describe(self, url: str, commit: str) -> str:
        """`DESCRIBE_RULE`: the same answer whatever else the mirror holds (the bare abbreviated commit when
        no tag matches)."""
        r = git(["describe", *DESCRIBE_ARGS, "--always", commit], git_dir=self.path(url), check=False)
        return r.stdout.strip()

    def commit_info(self, url: str, commit: str) -> dict[str, str]:
        fmt = "%H%x00%s%x00%cI%x00%ct%x00%an"
        r = git(["show", "-s", f"--format={fmt}", commit], git_dir=self.path(url))
        sha, subject, date, epoch, author = r.stdout.rstrip("\n").split("\x00")
        return {"commit": sha, "subject": subject, "date": date, "epoch": epoch, "author": author}

    def checkout(self, url: str, commit: str, dest: Path, *, sparse: str = "") -> Path:
        """A shared clone of the mirror at `commit` (objects are borrowed, not copied; tags kept)."""
        mirror = self.path(url)
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        log = self._log(url)
        git(["clone", "--quiet", "--shared", "--no-checkout", str(mirror), str(dest)], log=log)
        git(["config", "core.abbrev", str(DESCRIBE_ABBREV)], cwd=dest, log=log)  # see DESCRIBE_RULE
        git(["checkout", "--quiet", "--detach", commit], cwd=dest, log=log)
        return dest
