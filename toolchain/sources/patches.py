"""Patch series: each patch is checked before it is applied, so a failing series leaves nothing half-applied."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.core.fs import atomic_write_bytes, open_log, sha256_bytes, sha256_file
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


ROOT, SUBDIR = "root", "subdir"  # where a patch's paths start: the repository's root, or the component's subdir


def patch_paths(text: str) -> list[str]:
    """The files a patch (git format-patch, git diff or diff -u) changes, as its headers name them."""
    paths = []
    for line in text.splitlines():
        m = re.match(r"^diff --git a/(\S+) b/(\S+)", line) or re.match(r"^(?:---|\+\+\+) [ab]/(\S+)", line)
        if m:
            paths += [g for g in m.groups() if g]
    return list(dict.fromkeys(paths))


def applies_at(text: str, subdir: str) -> str:
    """Where a patch for a component built from `subdir` was made: at the repository's root (every path it
    changes starts with `subdir/`, as `git format-patch` in the repository and upstream pull requests give
    them) or inside `subdir` (paths relative to it). Without a subdir both are the root."""
    if not subdir:
        return ROOT
    paths = patch_paths(text)
    return ROOT if paths and all(p.startswith(subdir.strip("/") + "/") for p in paths) else SUBDIR


def applied_at(patch: Patch, subdir: str) -> str:
    """`applies_at` of a local patch's file ("" when there is no file to read: a lock's or a remote patch)."""
    if patch.file is None or not subdir:
        return ""
    return applies_at(patch.file.read_text("utf-8", "surrogateescape"), subdir)


def apply_series(series: tuple[Patch, ...], files: list[Path], tree: Path, *, subdir: str, what: str,
                 log: Path | None) -> list[str]:
    """Apply in order; returns where each patch's paths started (ROOT or SUBDIR). A patch for a component in
    `subdir` is tried as made where its paths say first (`applies_at`), then the other way. Every patch is
    `git apply --check`ed against the tree as the earlier ones left it; on a failure the tree is reset to the
    pinned commit, so nothing stays half-applied."""
    forms = []
    for patch, file in zip(series, files, strict=False):
        first = applies_at(file.read_text("utf-8", "surrogateescape"), subdir)
        tries = [first, SUBDIR if first == ROOT else ROOT] if subdir else [ROOT]
        failures = []
        for form in tries:
            directory = ["--directory", subdir] if form == SUBDIR else []
            check = git(["apply", "--check", "--verbose", *directory, str(file)], cwd=tree, log=log, check=False)
            if check.returncode == 0:
                git(["apply", *directory, str(file)], cwd=tree, log=log)
                forms.append(form)
                if log is not None and subdir:
                    with open_log(log) as f:
                        f.write(f"patch {redact_text(patch.label)}: applied as made "
                                f"{'at the repository root' if form == ROOT else f'inside {subdir}/'}\n")
                break
            failures.append((form, check.stderr))
        else:
            git(["reset", "--quiet", "--hard"], cwd=tree, log=log)
            git(["clean", "-ffdxq"], cwd=tree, log=log)
            tried = "".join(f"\n as made {'at the repository root' if form == ROOT else f'inside {subdir}/'}:\n"
                            + _where(err) for form, err in failures) if subdir else "\n" + _where(failures[0][1])
            raise SourceError(redact_text(f"patch {patch.label} does not apply to {what}:") + tried,
                              hint=f"refresh {file} against that commit (git format-patch in the repository"
                                   + (f": its paths may start at the root or inside {subdir}/" if subdir else "")
                                   + "), or drop it from the recipe's `patches`")
    return forms


def _where(stderr: str) -> str:
    """The lines of git's answer that name the file and hunk."""
    keep = [line for line in stderr.splitlines()
            if re.search(r"error:|while searching|patch failed|does not exist|already exists|Hunk", line)]
    return "\n".join("  " + line for line in (keep or stderr.splitlines())[:12])
