"""Patch series: each patch is checked before it is applied, so a failing series leaves nothing half-applied."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.core.fs import atomic_write_bytes, sha256_bytes, sha256_file
from toolchain.core.git import git
from toolchain.core.redact import redact_text
from toolchain.errors import SourceError
from toolchain.recipe.model import Patch

if TYPE_CHECKING:
    from toolchain.sources.mirrors import Mirrors


def materialize(patch: Patch, mirrors: Mirrors, cache_dir: Path) -> Path:
    """The patch as a file whose content hashes to `patch.sha256`: a local one as the recipe resolved it
    (checked again: it may have changed since), a remote one taken from its repository at the pinned commit
    and kept content-addressed under `<cache>/patches/`."""
    if patch.file is not None:
        digest = sha256_file(patch.file)
        if digest != patch.sha256:
            raise SourceError(f"patch {patch.file} changed while in use: sha256 {digest}, planned {patch.sha256}",
                              hint="run the command again once the patch is final")
        return patch.file
    if not patch.remote:
        raise SourceError(redact_text(f"patch {patch.label}: no file (a lock's patch is found through its recipe)"))
    dest = Path(cache_dir) / "patches" / f"{patch.sha256}.patch"
    if dest.is_file() and sha256_file(dest) == patch.sha256:
        return dest
    label = redact_text(patch.label)  # the URL may hold credentials (user:password@, a token)
    mirror = mirrors.ensure(patch.url, patch.commit, where=f"patch {label}")
    r = git(["show", f"{patch.commit}:{patch.path}"], git_dir=mirror, check=False)
    if r.returncode != 0:
        raise SourceError(f"patch {label}: {patch.path} does not exist at {patch.commit}",
                          hint="check `path` (relative to that repository's root) and `commit`")
    data = r.stdout.encode("utf-8", "surrogateescape")
    if sha256_bytes(data) != patch.sha256:
        raise SourceError(f"patch {label} has sha256 {sha256_bytes(data)}, the recipe pins {patch.sha256}",
                          hint="the file changed at that commit? re-check it and update `sha256` deliberately")
    atomic_write_bytes(dest, data)
    return dest


def apply_series(series: tuple[Patch, ...], files: list[Path], tree: Path, *, subdir: str, what: str,
                 log: Path | None) -> None:
    """Apply in order. Every patch is `git apply --check`ed against the tree as the earlier ones left it;
    on a failure the tree is reset to the pinned commit, so nothing stays half-applied."""
    directory = ["--directory", subdir] if subdir else []
    for patch, file in zip(series, files):
        check = git(["apply", "--check", "--verbose", *directory, str(file)], cwd=tree, log=log, check=False)
        if check.returncode != 0:
            git(["reset", "--quiet", "--hard"], cwd=tree, log=log)
            git(["clean", "-ffdxq"], cwd=tree, log=log)
            raise SourceError(redact_text(f"patch {patch.label} does not apply to {what}:\n") + _where(check.stderr),
                              hint=f"refresh {file} against that commit (git format-patch), "
                                   "or drop it from the recipe's `patches`")
        git(["apply", *directory, str(file)], cwd=tree, log=log)


def _where(stderr: str) -> str:
    """The lines of git's answer that name the file and hunk."""
    keep = [line for line in stderr.splitlines()
            if re.search(r"error:|while searching|patch failed|does not exist|already exists|Hunk", line)]
    return "\n".join("  " + line for line in (keep or stderr.splitlines())[:12])
