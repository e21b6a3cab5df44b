"""The build requirements a source tree declares (`build-system.requires` of its pyproject.toml) that the
interpreter running this has not installed, one a line (none: nothing printed). Requirements with environment
markers are not checked (too rare in build requirements to evaluate here). `missing()` is also the rule the
package applies to the versions a remembered probe found (a warm build's check of a cached wheel's
requirements, toolchain/build/buildreqs.py): importlib.metadata is imported only where this runs as a file.

    python build_requires.py SOURCE_DIR
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable

TABLE_RE = r"\[build-system\][^\[]*?requires\s*=\s*\[(.*?)\]"  # (compiled where used: Python < 3.11 only)
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _name(req: str) -> str:
    r"""The distribution name `req` starts with, as `\s*([A-Za-z0-9][A-Za-z0-9._-]*)` reads it ("": none),
    without a pattern to compile (a warm build reads a few, in process)."""
    text = req.lstrip()
    end = 0
    while end < len(text) and text[end] in NAME_CHARS:
        end += 1
    return text[:end] if end and text[0] not in "._-" else ""


def declared(text: str) -> list[str]:
    try:
        import tomllib
    except ImportError:  # Python < 3.11: the requires list read by pattern
        m = re.search(TABLE_RE, text, re.S)
        return re.findall(r"[\"']([^\"']+)[\"']", m.group(1)) if m else []
    reqs = tomllib.loads(text).get("build-system", {}).get("requires", [])
    return [str(r) for r in reqs]


def names(reqs: list[str]) -> list[str]:
    """The distribution names `missing` reads a version of for `reqs`."""
    found = [n for r in reqs if ";" not in r and (n := _name(r))]
    return [*found, "setuptools"] if any(n.lower() == "wheel" for n in found) else found


def missing(reqs: list[str], version: Callable[[str], str | None]) -> list[str]:
    """The requirements of `reqs` not installed, by `version(name)` (None: not installed)."""
    out = []
    for req in reqs:
        name = _name(req)
        if ";" in req or not name:
            continue
        if name.lower() == "wheel":
            found = version("setuptools") or ""
            parts = "".join(c if c.isdecimal() else " " for c in found).split()[:2]  # (re.findall(r"\d+", found))
            if tuple(int(p) for p in parts) >= (70, 1):
                continue  # setuptools 70.1 builds wheels itself (bdist_wheel): the wheel package is not imported
        if version(name) is None:
            out.append(req)
    return out


def installed(name: str) -> str | None:
    """The installed version of `name` in this interpreter (None: not installed)."""
    from importlib import metadata

    try:
        return metadata.distribution(name).version or ""
    except metadata.PackageNotFoundError:
        return None


def main(src: str) -> None:
    path = os.path.join(src, "pyproject.toml")
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        text = f.read()
    print("\n".join(missing(declared(text), installed)))


if __name__ == "__main__":
    main(sys.argv[1])
