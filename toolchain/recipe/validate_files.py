"""The files a recipe's component names, validated (recipe.validate calls these): its patches (local, under the
declaring recipe's patches/, or pinned tables from another repository) and its input files, each with its
sha256; a lock's recipe takes a file found nowhere from the cache by its recorded hash (`_Kept`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from toolchain.core import blobs
from toolchain.core.fs import sha256_file
from toolchain.core.regex import HEX40, SHA256_HEX
from toolchain.recipe.keys import keys_of
from toolchain.recipe.model import InputFile, Origin, Patch, Recorded
from toolchain.recipe.problems import _Problems


class _Kept:
    """One component's files as a lock records them (`Recorded`): the copy the cache keeps of a file whose
    recorded place is empty, or the problem naming it, its sha256 and every place looked."""

    def __init__(self, recorded: Recorded | None, component: str) -> None:
        self.recorded, self.component = recorded, component

    def find(self, what: str, label: str, looked: Sequence[Path], pr: _Problems, where: str,
             origin: Origin) -> Path | None:
        """None (a problem added) unless the lock records `label` and the cache keeps a file of its hash."""
        sha = self.recorded.sha256.get((self.component, label)) if self.recorded is not None else None
        if sha is None or self.recorded is None:
            pr.add(where, f"{what} {label} is not in " + ", ".join(map(str, looked)) + ", and the lock records "
                          "no sha256 for it", file=origin.file)
            return None
        searched = self.candidates(label)
        kept = next((c for c in searched if c.is_file() and sha256_file(c) == sha), None) \
            or blobs.find(self.recorded.cache_dir, sha)
        if kept is not None:
            return kept
        places = [*map(str, dict.fromkeys([*looked, *searched])),
                  f"the cache ({blobs.blob_path(self.recorded.cache_dir, sha)})"
                  if self.recorded.cache_dir is not None else "no cache"]
        pr.add(where, f"{what} {label} (sha256 {sha}) is missing: looked in " + ", ".join(places), file=origin.file)
        pr.missing += 1
        return None

    def candidates(self, label: str) -> list[Path]:
        """Where a file recorded as `label` may be in the search folders: under its recorded path, and by its
        name in the folder of this component's inputs (a bundle's inputs/<component>/)."""
        name = Path(label).name
        dirs = self.recorded.search if self.recorded is not None else ()
        found = [d / label for d in dirs] + [d / "inputs" / self.component / name for d in dirs]
        return list(dict.fromkeys(found))

    @property
    def active(self) -> bool:
        return self.recorded is not None


def _inputs(paths: Sequence[str], pr: _Problems, where: str, origin: Origin,
            kept: _Kept | None = None) -> tuple[InputFile, ...]:
    """Declared input files, relative to the recipe that names them (or absolute), each with its sha256."""
    out = []
    for i, rel in enumerate(paths):
        path = Path(rel).expanduser()
        path = path if path.is_absolute() else origin.dir / path
        if not path.is_file():
            if kept is not None and kept.active:
                found = kept.find("input", rel, [path], pr, f"{where}[{i}]", origin)
                if found is not None:
                    out.append(InputFile(rel, sha256_file(found), found))
                continue
            pr.add(f"{where}[{i}]", f"{rel}: no such file (relative paths are to {origin.file.name})",
                   file=origin.file)
            continue
        out.append(InputFile(rel, sha256_file(path), path.resolve()))
    return tuple(out)


PATCH_KEYS = keys_of(Patch)
REMOTE_PATCH_KEYS = tuple(PATCH_KEYS)  # a pinned patch table needs every one


def _patches(items: Any, pr: _Problems, where: str, origin: Origin, kept: _Kept | None = None, *,
             numbered: bool = True) -> tuple[Patch, ...]:
    if not isinstance(items, list):
        return ()
    out = []
    for i, p in enumerate(items):
        w = f"{where}[{i}]" if numbered else where
        if isinstance(p, str):
            local = _local_patch(p, origin, pr, w, kept)
            if local is not None:
                out.append(local)
        elif isinstance(p, dict):
            remote = _remote_patch(p, origin, pr, w)
            if remote is not None:
                out.append(remote)
        else:
            pr.add(w, f"entries are file names under patches/ or tables {{url, commit, path, sha256}}, got {p!r}",
                   file=origin.file)
    return tuple(out)


def _local_patch(rel: str, origin: Origin, pr: _Problems, where: str, kept: _Kept | None = None) -> Patch | None:
    """A file under the patches/ directory of the recipe that names it: no absolute path, no `..`, and no
    symlink leading out of that directory."""
    table = "a patch from anywhere else is a pinned table {url, commit, path, sha256}"
    dirs = " or ".join(str(d) for d in origin.patches_dirs)
    parts = PurePosixPath(rel).parts
    if not rel.strip() or PurePosixPath(rel).is_absolute() or Path(rel).is_absolute() or "\\" in rel:
        pr.add(where, f"patch {rel!r} is not a path relative to {dirs}; {table}", file=origin.file)
        return None
    if ".." in parts:
        pr.add(where, f"patch {rel!r} leaves {dirs} ('..' is not allowed); {table}", file=origin.file)
        return None
    for pdir in origin.patches_dirs:
        candidate = pdir / rel
        if not (candidate.exists() or candidate.is_symlink()):
            continue
        real, root = candidate.resolve(), pdir.resolve()
        if not real.is_relative_to(root):
            pr.add(where, f"patch {rel!r} is a symlink to {real}, outside {pdir}; {table}", file=origin.file)
        elif not real.is_file():
            pr.add(where, f"patch {rel!r} in {pdir} is not a file", file=origin.file)
        else:
            return Patch(rel, sha256_file(real), file=real)
        return None
    if kept is not None and kept.active:  # a lock's recipe: the cache's copy of the recorded hash
        found = kept.find("patch", rel, [d / rel for d in origin.patches_dirs], pr, where, origin)
        return Patch(rel, sha256_file(found), file=found) if found is not None else None
    pr.add(where, f"patch {rel!r} not found in {dirs} (paths are relative to patches/ beside "
                  f"{origin.file.name}, or beside its recipes/ directory; {table})", file=origin.file)
    return None


def _remote_patch(p: dict[str, Any], origin: Origin, pr: _Problems, where: str) -> Patch | None:
    pr.check_keys(p, PATCH_KEYS, f"{where}.", file=origin.file)
    missing = [k for k in REMOTE_PATCH_KEYS if not isinstance(p.get(k), str) or not p.get(k)]
    if missing:
        pr.add(where, f"a patch from another repository needs url, commit, path and sha256; missing "
                      f"{', '.join(missing)}", file=origin.file)
        return None
    ok = True
    if not HEX40.match(p["commit"]):
        pr.add(f"{where}.commit", f"must be a 40-hex commit id, got {p['commit']!r}", file=origin.file)
        ok = False
    if not SHA256_HEX.match(p["sha256"]):
        pr.add(f"{where}.sha256", "must be the 64-hex sha256 of the patch file", file=origin.file)
        ok = False
    path = PurePosixPath(p["path"])
    if path.is_absolute() or ".." in path.parts:
        pr.add(f"{where}.path", f"must be a path inside that repository (relative, no '..'), got {p['path']!r}",
               file=origin.file)
        ok = False
    return Patch(p["path"], p["sha256"], url=p["url"], commit=p["commit"]) if ok else None
