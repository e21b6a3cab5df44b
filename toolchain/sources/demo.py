"""The offline demo: the projects in `demo_src/` become local git repositories with history and tags.

Authors and dates are fixed, so the commit ids are the same on every machine and `recipes/demo.toml` can
pin them. The repositories are published atomically under `<cache>/demo-repos/<content hash>/` and reached
through a URL rewrite of `https://demo.invalid/toolchain-demo/`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from toolchain.core import toml as tomlio
from toolchain.core.fs import file_lock, lock_held, publish_dir, sha256_bytes
from toolchain.core.git import git
from toolchain.core.probe_memo import remembered
from toolchain.sources.mirrors import Rewrite

SRC = Path(__file__).resolve().parents[1] / "demo_src"
DEMO_URL = "https://demo.invalid/toolchain-demo/"
STANDIN_SETVARS = SRC / "oneapi-standin" / "setvars.sh"
EPOCH = 1767268800  # 2026-01-01T12:00:00Z; each commit is one hour after the previous one


def _content_hash(memo_dir: Path | None = None) -> str:
    """The demo sources' hash; with `memo_dir`, remembered while no file or folder of them changes (a warm
    build stats them instead of reading and hashing them all)."""
    def compute() -> tuple[str, list[str]]:
        parts, seen = [], [str(SRC)]
        for p in sorted(SRC.rglob("*")):
            if "__pycache__" in p.parts:
                continue
            seen.append(str(p))
            if p.is_file():
                parts.append(f"{p.relative_to(SRC)}\0{sha256_bytes(p.read_bytes())}")
        return sha256_bytes("\n".join(parts).encode())[:16], seen

    return remembered(memo_dir, "demo-src", {"src": str(SRC)}, compute)


def materialize(cache_dir: Path) -> Path:
    """The folder holding `<project>.git` for every demo project (made once per content hash)."""
    final = Path(cache_dir) / "demo-repos" / _content_hash(Path(cache_dir) / "memo")
    if (final / ".complete").exists():
        return final
    with file_lock(final.with_suffix(".lock")):
        if (final / ".complete").exists():
            return final
        shutil.rmtree(final, ignore_errors=True)
        _remove_dead_runs(final.parent, final.name)
        tmp = final.with_name(f".tmp-{final.name}-{os.urandom(4).hex()}")
        tmp.mkdir(parents=True)
        history = tomlio.load_file(SRC / "history.toml")
        for project, commits in history.items():
            make_repo(tmp / f"{project}.git", [(SRC / c["dir"], c["message"], c.get("tags", [])) for c in commits])
        (tmp / ".complete").write_text("ok\n")
        publish_dir(tmp, final)
    return final


def _remove_dead_runs(parent: Path, held: str) -> None:
    """Remove the `.tmp-<hash>-*` folders of runs killed while they made the repositories: of `held` (whose
    lock this run holds: no other run is making it), and of any other hash whose lock no one holds."""
    for stale in parent.glob(".tmp-*"):
        name = stale.name[len(".tmp-"):].rsplit("-", 1)[0]
        if name == held or not lock_held(parent / f"{name}.lock"):
            shutil.rmtree(stale, ignore_errors=True)  # (a link there is not followed: rmtree refuses it)


def make_repo(bare: Path, commits: list[tuple[Path, str, list[str]]], *, epoch: int = EPOCH) -> list[str]:
    """A bare repository whose commits lay each folder over the tree before it. Returns the commit ids."""
    work = bare.with_name(bare.name + ".work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    git(["init", "--quiet", "--bare", "--initial-branch=main", str(bare)])
    ids = []
    try:
        for i, (folder, message, tags) in enumerate(commits):
            _overlay(folder, work)
            when = f"@{epoch + 3600 * i} +0000"
            env = {"GIT_AUTHOR_NAME": "Demo Author", "GIT_AUTHOR_EMAIL": "demo@example.invalid",
                   "GIT_COMMITTER_NAME": "Demo Author", "GIT_COMMITTER_EMAIL": "demo@example.invalid",
                   "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
            base = ["--git-dir", str(bare), "--work-tree", str(work)]
            git([*base, "add", "-A"])
            git([*base, "commit", "--quiet", "--no-verify", "-m", message], env=env)
            sha = git([*base, "rev-parse", "HEAD"]).stdout.strip()
            ids.append(sha)
            for tag in tags:
                git([*base, "tag", tag, sha])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ids


def _overlay(src: Path, dest: Path) -> None:
    for p in sorted(src.rglob("*")):
        if "__pycache__" in p.parts:
            continue
        target = dest / p.relative_to(src)
        if p.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, target)
            os.chmod(target, 0o755 if os.access(p, os.X_OK) else 0o644)


def demo_rewrite(cache_dir: Path) -> Rewrite:
    """The URL rewrite sending the demo's repository URL to its local git copy, made on first use."""
    return Rewrite(DEMO_URL, "file://" + str(materialize(cache_dir)) + "/")
