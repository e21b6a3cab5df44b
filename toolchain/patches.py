"""Patch series: each patch is checked before it is applied, so a failing series leaves nothing half-applied."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import SourceError
from .fsutil import sha256_file
from .sources import git


@dataclass(frozen=True)
class Patch:
    path: str       # relative to the patches directory, as the recipe names it
    file: Path      # absolute
    sha256: str


def load_series(patches_dir: Path, names: tuple[str, ...]) -> tuple[Patch, ...]:
    return tuple(Patch(n, (patches_dir / n).resolve(), sha256_file(patches_dir / n)) for n in names)


def apply_series(series: tuple[Patch, ...], tree: Path, *, subdir: str, what: str, log: Path | None) -> None:
    """Apply in order. Every patch is `git apply --check`ed against the tree as the earlier ones left it;
    on a failure the tree is reset to the pinned commit, so nothing stays half-applied."""
    directory = ["--directory", subdir] if subdir else []
    for patch in series:
        check = git(["apply", "--check", "--verbose", *directory, str(patch.file)], cwd=tree, log=log, check=False)
        if check.returncode != 0:
            git(["reset", "--quiet", "--hard"], cwd=tree, log=log)
            git(["clean", "-ffdxq"], cwd=tree, log=log)
            raise SourceError(f"patch {patch.path} does not apply to {what}:\n{_where(check.stderr)}",
                              hint=f"refresh {patch.file} against that commit (git format-patch), "
                                   "or drop it from the recipe's `patches`")
        git(["apply", *directory, str(patch.file)], cwd=tree, log=log)


def _where(stderr: str) -> str:
    """The lines of git's answer that name the file and hunk."""
    keep = [line for line in stderr.splitlines()
            if re.search(r"error:|while searching|patch failed|does not exist|already exists|Hunk", line)]
    return "\n".join("  " + line for line in (keep or stderr.splitlines())[:12])
