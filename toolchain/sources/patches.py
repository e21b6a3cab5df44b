"""Patch series: each patch is checked before it is applied, so a failing series leaves nothing half-applied."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from toolchain.core.fs import atomic_write_bytes, sha256_bytes, sha256_file
from toolchain.core.git import git
from toolchain.errors import SourceError
from toolchain.recipe.load import PatchSpec


@dataclass(frozen=True)
class Patch:
    path: str               # as the lock names it: relative to patches/, or url@commit:path
    file: Path | None       # a local file; None for a patch still to be taken from its repository
    sha256: str
    spec: PatchSpec


def load_series(patches_dir: Path, specs: tuple[PatchSpec, ...]) -> tuple[Patch, ...]:
    """Local patches are hashed now; a remote patch carries the sha256 the recipe pins (checked on use)."""
    out = []
    for s in specs:
        if s.remote:
            out.append(Patch(s.label, None, s.sha256, s))
        else:
            f = (patches_dir / s.path).resolve()
            out.append(Patch(s.path, f, sha256_file(f), s))
    return tuple(out)


def materialize(patch: Patch, mirrors, cache_dir: Path) -> Path:
    """The patch as a file: local as is; remote taken from its repository at the pinned commit, checked
    against the pinned sha256 and kept content-addressed under `<cache>/patches/`."""
    if patch.file is not None:
        return patch.file
    spec = patch.spec
    dest = Path(cache_dir) / "patches" / f"{spec.sha256}.patch"
    if dest.is_file() and sha256_file(dest) == spec.sha256:
        return dest
    mirror = mirrors.ensure(spec.url, spec.commit, where=f"patch {patch.path}")
    r = git(["show", f"{spec.commit}:{spec.path}"], git_dir=mirror, check=False)
    if r.returncode != 0:
        raise SourceError(f"patch {patch.path}: {spec.path} does not exist at {spec.commit}",
                          hint="check `path` (relative to that repository's root) and `commit`")
    data = r.stdout.encode("utf-8", "surrogateescape")
    if sha256_bytes(data) != spec.sha256:
        raise SourceError(f"patch {patch.path} has sha256 {sha256_bytes(data)}, the recipe pins {spec.sha256}",
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
            raise SourceError(f"patch {patch.path} does not apply to {what}:\n{_where(check.stderr)}",
                              hint=f"refresh {file} against that commit (git format-patch), "
                                   "or drop it from the recipe's `patches`")
        git(["apply", *directory, str(file)], cwd=tree, log=log)


def _where(stderr: str) -> str:
    """The lines of git's answer that name the file and hunk."""
    keep = [line for line in stderr.splitlines()
            if re.search(r"error:|while searching|patch failed|does not exist|already exists|Hunk", line)]
    return "\n".join("  " + line for line in (keep or stderr.splitlines())[:12])
