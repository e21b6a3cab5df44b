"""Sources: a mirror cache (one bare repository per URL, full history and tags) and cheap checkouts.

A mirror is fetched only when the pinned commit is missing. `--mirror FROM=TO` rewrites URL prefixes
(air-gapped sites, tests); the cache is keyed by the recipe's URL, so a rewrite does not change it.
Checkouts are prepared source trees keyed by (commit, patches) and reused after a cleanliness check.

What git says about a commit is asked once per (mirror, commit): one `git cat-file --batch` answers both
"is it there?" and its committer date (kept in-process and on disk under `<cache>/git/meta/`: a commit id
names its content, so the answer is final while the mirror exists); `describe` is kept in-process until the
mirror is fetched again (a fetch can bring tags).
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from toolchain.console import UI
from toolchain.core.fs import file_lock, sha256_bytes
from toolchain.core.git import commit_id, git
from toolchain.core.probe_memo import remembered
from toolchain.core.proc.runner import CommandFailed
from toolchain.core.record import record
from toolchain.core.redact import redact_text, without_credentials
from toolchain.errors import BuildError, SourceError, UsageError

# `git describe` as setuptools-scm runs it in a tree (`--tags --long --match *[0-9]*`), with the abbreviation
# pinned: git's default grows with the object count, so a mirror holding pull refs gave g1234567 where a lean
# one gave g123456. Prepared trees get the same length as `core.abbrev`, so the version setuptools-scm
# computes inside a tree names the same abbreviation as the lock's `describe`.
DESCRIBE_ABBREV = 12
DESCRIBE_ARGS = ("--tags", "--long", f"--abbrev={DESCRIBE_ABBREV}", "--match", "*[0-9]*")
DESCRIBE_RULE = f"git describe {' '.join(DESCRIBE_ARGS)}; source trees: core.abbrev={DESCRIBE_ABBREV}"


@record
class Rewrite:
    """A URL rewrite: URLs starting with `prefix` are fetched from `replacement` instead."""

    prefix: str
    replacement: str


def parse_rewrites(pairs: Sequence[str]) -> tuple[Rewrite, ...]:
    """The --mirror FROM=TO pairs as rewrites, a UsageError for a pair without `=`."""
    out = []
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"--mirror {pair!r}: expected FROM=TO", hint="e.g. --mirror https://github.com/=file:///srv/git/")
        a, b = pair.split("=", 1)
        if "\x00" in pair:
            raise UsageError(f"--mirror {pair.replace(chr(0), '')!r}: holds a NUL byte", hint="remove the NUL (\\0)")
        if not a or not b:
            raise UsageError(f"--mirror {pair!r}: FROM and TO must both be non-empty")
        out.append(Rewrite(a, as_url(b)))
    return tuple(out)


def as_url(target: str) -> str:
    """A mirror target as a URL: a URL as is, a local path as an absolute file:// URL."""
    if "://" in target or target.startswith("git@"):
        return target
    path = os.path.abspath(target)
    return "file://" + path + ("/" if target.endswith("/") else "")


def local_path(url: str) -> str | None:
    """The folder a `file://` URL names on this machine, when it is one (git's local clone takes a path, never
    a URL); None for anything else."""
    if not url.startswith("file://"):
        return None
    parsed = urllib.parse.urlsplit(url)
    if parsed.netloc not in ("", "localhost") or parsed.query or parsed.fragment:
        return None
    path = urllib.parse.unquote(parsed.path)
    return path if os.path.isdir(path) else None


def rewrite_url(url: str, rewrites: Sequence[Rewrite]) -> str:
    """The longest matching prefix wins; of equal ones the later (`--mirror` comes after the recipe's)."""
    best = max((r for r in reversed(rewrites) if url.startswith(r.prefix)), key=lambda r: len(r.prefix),
               default=None)
    return best.replacement + url[len(best.prefix):] if best else url


def _slug(url: str) -> str:
    """A file name for `url`: its readable tail without credentials, and a hash of the whole URL."""
    tail = re.sub(r"\.git$", "", without_credentials(url).rstrip("/")).rsplit("/", 2)[-2:]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(tail)).strip("-") or "repo"
    return f"{name}-{sha256_bytes(url.encode())[:12]}"


INCOMING = "refs/toolchain-incoming"  # where a fetch lands before the refs are switched in one transaction
FETCHING = "toolchain-fetching"      # in a mirror while a fetch is under way: present = refs not to be trusted

# (mirror, commit) -> facts of a commit present in it; (mirror, commit) -> describe. Presence is final: mirrors
# never drop objects (gc.auto=0); describe is dropped for a mirror when it is fetched.
_COMMITS: dict[tuple[str, str], dict[str, str]] = {}
_DESCRIBE: dict[tuple[str, str], str] = {}
_LOCK = threading.Lock()


def parse_commit(sha: str, body: str) -> dict[str, str]:
    """The facts `commit_info` gives, from a raw commit object (`git cat-file commit`): its id, subject
    (first paragraph, lines joined), committer date (strict ISO 8601, as %cI) and epoch, author name."""
    head, _, message = body.partition("\n\n")
    fields: dict[str, str] = {}
    for line in head.split("\n"):
        if line[:1] != " ":  # continuation lines (a gpgsig) belong to the header before them
            key, _, value = line.partition(" ")
            fields.setdefault(key, value)
    from datetime import datetime, timedelta, timezone  # (a warm build reads no commit)

    author = fields.get("author", "").rsplit(" <", 1)[0]
    stamp, zone = fields["committer"].rsplit(" ", 2)[-2:]
    sign = -1 if zone.startswith("-") else 1
    offset = timedelta(hours=int(zone[1:3]), minutes=int(zone[3:5])) * sign
    date = datetime.fromtimestamp(int(stamp), timezone(offset)).isoformat()
    subject = " ".join(message.split("\n\n", 1)[0].strip("\n").split("\n")).strip()
    return {"commit": sha, "subject": subject, "date": date, "epoch": stamp, "author": author}


class Mirrors:
    """The mirror cache under `<cache>/git/`. Safe for concurrent users (one flock per mirror) and kill -9.

    A fetch lands in `refs/toolchain-incoming/` and the real refs are switched to it in one `update-ref
    --stdin` transaction, so a mirror has its old refs or its new ones. A mirror carries FETCHING from before
    its fetch until after that transaction: one that has it (a fetcher was killed) is fetched again before
    it is used, whatever objects it holds. `refresh` (`--fresh-sources`) fetches every mirror once per run,
    and makes a mirror anew when it cannot be fetched into (it is damaged).
    """

    def __init__(self, cache_dir: Path, rewrites: Sequence[Rewrite] = (), log_dir: Path | None = None,
                 ui: UI | None = None, *, refresh: bool = False) -> None:
        self.root = Path(cache_dir) / "git"
        self.rewrites = tuple(rewrites)
        self.log_dir = log_dir
        self.ui = ui
        self.refresh = refresh
        self._fetched: set[str] = set()  # URLs fetched by this instance (a refresh fetches each once)

    def path(self, url: str) -> Path:
        """Where the bare mirror of the repository at `url` lives."""
        return self.root / f"{_slug(url)}.git"

    def _log(self, url: str) -> Path | None:
        return self.log_dir / f"git-{_slug(url)}.log" if self.log_dir else None

    def _trusted(self, mirror: Path) -> bool:
        """A mirror whose objects can be used: no fetch was cut short, and it has its branches or tags (a
        mirror whose refs were lost holds the commits but nothing `git describe` can name: fetched again)."""
        return (mirror / "HEAD").exists() and not (mirror / FETCHING).exists() and _has_refs(mirror)

    def has_commit(self, url: str, commit: str) -> bool:
        """Whether the mirror of `url` already holds `commit`."""
        return self._commit(url, commit) is not None

    def _commit(self, url: str, commit: str) -> dict[str, str] | None:
        """The commit's facts, or None when the mirror lacks it: asked once per (mirror, commit)."""
        mirror = self.path(url)
        if not self._trusted(mirror):  # no mirror, or a fetch was killed: what was kept is not used
            return None
        key = (str(mirror), commit)
        if key in _COMMITS:
            return _COMMITS[key]

        def ask() -> tuple[dict[str, str] | None, list[str] | None]:
            r = git(["cat-file", "--batch"], git_dir=mirror, stdin=f"{commit}^{{commit}}\n".encode(), check=False)
            first, _, rest = r.stdout.partition("\n")
            words = first.split()
            if r.returncode != 0 or len(words) != 3 or words[1] != "commit":
                return None, None  # missing: not remembered (a fetch may bring it)
            body = rest[:-1] if rest.endswith("\n") else rest  # the content, then a newline
            # what git read the answer from beside the (immutable) object: the objects folder (a mirror removed
            # and made again is asked again), and what can make a commit id read as another object (replace
            # refs, loose or packed; grafts) or change how it is read (the mirror's config)
            return parse_commit(words[0], body), [str(mirror / p) for p in (
                "objects", "refs/replace", "packed-refs", "info/grafts", "config")]

        found = remembered(self.root / "meta", "commit", {"mirror": str(mirror), "commit": commit}, ask)
        if found is not None:
            with _LOCK:
                _COMMITS[key] = found
        return found

    def _needs_fetch(self, url: str, commit: str | None) -> bool:
        if self.refresh and url not in self._fetched:
            return True
        return not (commit and self.has_commit(url, commit))

    def ensure(self, url: str, commit: str | None = None, *, where: str = "") -> Path:
        """The mirror of `url`, fetched if `commit` (or, with None, anything) is missing."""
        mirror = self.path(url)
        if not self._needs_fetch(url, commit):
            return mirror
        with file_lock(mirror.with_suffix(".lock")):
            if not self._needs_fetch(url, commit):
                return mirror
            self._fetch(url, mirror)
            self._fetched.add(url)
            if commit and not self.has_commit(url, commit):
                fetched = rewrite_url(url, self.rewrites)
                raise SourceError(
                    redact_text(f"{where + ': ' if where else ''}commit {commit} is not in {url}"
                                + (f" (fetched from {fetched})" if fetched != url else "")),
                    hint="check the pinned `commit` (was the branch force-pushed?), or run "
                         "`toolchain update --recipe ...` to pin the current head of `ref`")
        return mirror

    def _fetch(self, url: str, mirror: Path) -> None:
        """Fetch into `mirror` (made when missing; made anew when damaged and this is a refresh).
        Called holding the mirror's lock."""
        source = rewrite_url(url, self.rewrites)
        log = self._log(url)
        if self.ui:
            self.ui.step(redact_text(f"fetching {url}" + (f" via {source}" if source != url else "")))
        for stale in mirror.parent.glob(f".tmp-{mirror.name}-*"):  # a killed fetcher's (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            if not (mirror / "HEAD").exists():
                self._replace(mirror, self._cloned(mirror, source, log))
                return
            self._fetch_into(mirror, source, log)
        except CommandFailed as exc:
            if self.refresh and mirror.is_dir():
                # a damaged mirror cannot be fetched into: make it anew beside it, swap when it is whole
                fresh = self._new_mirror(mirror, source, log)
                try:
                    self._fetch_into(fresh, source, log)
                except CommandFailed:
                    shutil.rmtree(fresh, ignore_errors=True)
                else:
                    self._replace(mirror, fresh)
                    return
            what = redact_text(f"cannot fetch {url}" + (f" (from {source})" if source != url else ""))
            if "No space left on device" in exc.tail:
                raise BuildError(f"{what} into {mirror}: No space left on device\n{redact_text(exc.tail)}",
                                 hint=f"free space under {self.root.parent}, or pass another --cache-dir "
                                      "(or set $TOOLCHAIN_CACHE_DIR)") from None
            raise SourceError(f"{what}: git exited with {exc.returncode}\n{redact_text(exc.tail)}",
                              hint="check the URL and your network, or map it to a local mirror with "
                                   "--mirror FROM=TO (or [mirrors] in the recipe); if the mirror "
                                   f"{mirror} is damaged, --fresh-sources makes it anew") from None

    def _cloned(self, mirror: Path, source: str, log: Path | None) -> Path:
        """A new mirror beside `mirror`, whole: one `git clone --bare` (branches to refs/heads, every tag, the
        URL as origin, gc.auto=0) into a temporary directory, which only a finished clone leaves; three
        processes fewer than making an empty one and fetching into it. A mirror on this machine is cloned by
        its path (`local_path`): git then links or copies its objects instead of packing them anew through
        the file:// transport (auto-round's 50 MB history: 0.06 s instead of 3 s of pack-objects)."""
        tmp = mirror.with_name(f".tmp-{mirror.name}-{os.getpid()}-{os.urandom(4).hex()}")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        try:
            git(["clone", "--bare", "--progress", "--config", "gc.auto=0", local_path(source) or source, str(tmp)],
                log=log, capture=False)
            if local_path(source):
                git(["config", "remote.origin.url", source], git_dir=tmp)  # later fetches name the URL as given
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return tmp

    def _new_mirror(self, mirror: Path, source: str, log: Path | None) -> Path:
        """An empty bare repository beside `mirror`, marked as not yet fetched."""
        tmp = mirror.with_name(f".tmp-{mirror.name}-{os.getpid()}-{os.urandom(4).hex()}")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        git(["init", "--bare", "--quiet", str(tmp)], log=log)
        git(["config", "gc.auto", "0"], git_dir=tmp)
        (tmp / FETCHING).write_text("")
        return tmp

    @staticmethod
    def _replace(mirror: Path, new: Path) -> None:
        """Put `new` at `mirror`; whatever was there (damaged, or a mirror without HEAD) is removed."""
        if mirror.exists() or mirror.is_symlink():
            trash = mirror.with_name(f".tmp-{mirror.name}-old-{os.urandom(4).hex()}")
            os.rename(mirror, trash)
            if trash.is_dir() and not trash.is_symlink():
                shutil.rmtree(trash, ignore_errors=True)
            else:
                trash.unlink()
        os.rename(new, mirror)

    def _fetch_into(self, mirror: Path, source: str, log: Path | None) -> None:
        with _LOCK:  # a fetch can add or move tags: what describe said may change
            for key in [k for k in _DESCRIBE if k[0] == str(mirror)]:
                del _DESCRIBE[key]
        (mirror / FETCHING).write_text("")
        git(["config", "remote.origin.url", source], git_dir=mirror)
        git(["fetch", "--progress", "--force", "--no-tags", "origin", f"+refs/heads/*:{INCOMING}/heads/*",
             f"+refs/tags/*:{INCOMING}/tags/*"], git_dir=mirror, log=log, capture=False)
        git(["update-ref", "--stdin"], git_dir=mirror, stdin=_switch_refs(mirror).encode(), log=log)
        (mirror / FETCHING).unlink()

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
        no tag matches). Kept in-process until the mirror is fetched again."""
        key = (str(self.path(url)), commit)
        if key not in _DESCRIBE:
            r = git(["describe", *DESCRIBE_ARGS, "--always", commit], git_dir=self.path(url), check=False)
            if r.returncode != 0:
                return r.stdout.strip()
            with _LOCK:
                _DESCRIBE[key] = r.stdout.strip()
        return _DESCRIBE[key]

    def commit_info(self, url: str, commit: str) -> dict[str, str]:
        """id, subject, date (%cI), epoch (%ct) and author of a commit the mirror has."""
        found = self._commit(url, commit)
        if found is None:
            raise SourceError(f"commit {commit} is not in the mirror of {url}",
                              hint="fetch it first (`Mirrors.ensure`)")
        return found

    def checkout(self, url: str, commit: str, dest: Path) -> Path:
        """A shared clone of the mirror at `commit`: objects are borrowed through alternates, not copied, and
        every branch and tag is visible (setuptools-scm's `git describe` in the tree sees full history). Files
        are written by parallel checkout workers (one per CPU): writing them is the cost of a first checkout."""
        mirror = self.path(url)
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        log = self._log(url)
        # core.abbrev in the clone's own config (see DESCRIBE_RULE), written by the clone itself
        git(["clone", "--quiet", "--shared", "--no-checkout", "--config", f"core.abbrev={DESCRIBE_ABBREV}",
             str(mirror), str(dest)], log=log)
        git(["-c", "checkout.workers=0", "checkout", "--quiet", "--detach", commit], cwd=dest, log=log)
        return dest


def _has_refs(mirror: Path) -> bool:
    """Whether a bare mirror has any branch or tag (loose or packed); read from the files, no git process."""
    for sub in ("refs/heads", "refs/tags"):
        for _root, _dirs, files in os.walk(mirror / sub):
            if files:
                return True
    try:
        with open(mirror / "packed-refs", encoding="utf-8", errors="replace") as f:
            return any(" refs/heads/" in line or " refs/tags/" in line for line in f)
    except OSError:
        return False


def _switch_refs(mirror: Path) -> str:
    """The `update-ref --stdin` transaction that makes refs/heads and refs/tags exactly what the fetch left
    under INCOMING (pruning what is gone upstream) and removes INCOMING."""
    listing = git(["for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags", INCOMING],
                  git_dir=mirror).stdout
    current: dict[str, str] = {}
    incoming: dict[str, str] = {}
    for line in listing.splitlines():
        oid, ref = line.split(" ", 1)
        if ref.startswith(INCOMING + "/"):
            incoming["refs/" + ref[len(INCOMING) + 1:]] = oid
        current[ref] = oid  # INCOMING's own refs are not in `incoming`: deleted below
    lines = [f"update {ref} {oid}" for ref, oid in sorted(incoming.items()) if current.get(ref) != oid]
    lines += [f"delete {ref}" for ref in sorted(current) if ref not in incoming]
    return "".join(line + "\n" for line in lines)
