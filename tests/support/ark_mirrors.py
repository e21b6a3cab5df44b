#!/usr/bin/env python3
"""Lay out the real ARK sources (git bundles in ../shared/mirrors, see its README.md) as a mirror folder
`DEST/OWNER/NAME.git`, which serves a recipe through `--mirror https://github.com/=file://DEST/`.

The auto-round bundle is a full history (its `main`); the three FetchContent bundles are depth-1 clones whose
only head is HEAD: each mirror gets its commit recorded as `shallow` (git then does not look for the missing
parents) and the tag ARK declares as a ref, so a fetch of the mirror's refs brings the commit and
`toolchain update` resolves the tag. Idempotent: a mirror already laid out is kept.

    python tests/support/ark_mirrors.py DEST [--bundles DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

BUNDLES = Path(os.environ.get("TOOLCHAIN_ARK_BUNDLES", "/work/shared/mirrors"))
# bundle file -> (OWNER/NAME, tag ARK declares or "" for a full history, commit)
LAYOUT = {
    "intel+auto-round.bundle": ("intel/auto-round", "", "b9f3d0079d014c73a1ff009800c597b9bc3f2a36"),
    "pybind+pybind11-v3.0.1.bundle": ("pybind/pybind11", "v3.0.1", "f5fbe867d2d26e4a0a9177a51f6e568868ad3dc8"),
    "herumi+xbyak-v7.06.bundle": ("herumi/xbyak", "v7.06", "fc183427e852a70fb98add1ba640020a53034bb0"),
    "uxlfoundation+oneDNN-v3.10.2.bundle": ("uxlfoundation/oneDNN", "v3.10.2",
                                            "f1d471933dc852f956fd05389f9313c7148783d5"),
}
ARK_COMMIT = LAYOUT["intel+auto-round.bundle"][2]


def missing(bundles: Path = BUNDLES) -> str:
    """Why the bundles cannot be used ("" when they can): names the folder and what goes there."""
    absent = [name for name in LAYOUT if not (bundles / name).is_file()]
    if not absent:
        return ""
    return (f"the real ARK bundles are missing from {bundles}: {', '.join(absent)}; put the git bundles there "
            "(see that folder's README.md) or point TOOLCHAIN_ARK_BUNDLES at the folder holding them")


def _git(*args: str) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True, env=env).stdout


def lay_out(dest: Path, bundles: Path = BUNDLES) -> Path:
    """The mirror folder at `dest` (made once); raises FileNotFoundError naming the missing bundles."""
    why = missing(bundles)
    if why:
        raise FileNotFoundError(why)
    for bundle, (slug, tag, commit) in LAYOUT.items():
        mirror = dest / f"{slug}.git"
        if (mirror / "toolchain-laid-out").exists():
            continue
        tmp = mirror.with_name(mirror.name + ".tmp")
        subprocess.run(["rm", "-rf", str(tmp)], check=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        _git("clone", "-q", "--mirror", str(bundles / bundle), str(tmp))
        if tag:
            (tmp / "shallow").write_text(commit + "\n")
            _git("--git-dir", str(tmp), "update-ref", f"refs/tags/{tag}", commit)
            _git("--git-dir", str(tmp), "update-ref", "refs/heads/main", commit)
            _git("--git-dir", str(tmp), "symbolic-ref", "HEAD", "refs/heads/main")
        if _git("--git-dir", str(tmp), "rev-parse", "--verify", f"{commit}^{{commit}}").strip() != commit:
            raise RuntimeError(f"{bundle}: commit {commit} not found")
        (tmp / "toolchain-laid-out").write_text(commit + "\n")
        subprocess.run(["rm", "-rf", str(mirror)], check=True)
        tmp.rename(mirror)
    return dest


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dest", type=Path)
    p.add_argument("--bundles", type=Path, default=BUNDLES)
    args = p.parse_args(argv)
    try:
        print(lay_out(args.dest.resolve(), args.bundles))
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
