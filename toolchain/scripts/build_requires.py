"""The build requirements a source tree declares (`build-system.requires` of its pyproject.toml) that the
interpreter running this has not installed, one a line (none: nothing printed). Requirements with environment
markers are not checked (too rare in build requirements to evaluate here).

    python build_requires.py SOURCE_DIR
"""

from __future__ import annotations

import os
import re
import sys
from importlib import metadata

TABLE_RE = re.compile(r"\[build-system\][^\[]*?requires\s*=\s*\[(.*?)\]", re.S)
NAME_RE = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def declared(text: str) -> list[str]:
    try:
        import tomllib
    except ImportError:  # Python < 3.11: the requires list read by pattern
        m = TABLE_RE.search(text)
        return re.findall(r"[\"']([^\"']+)[\"']", m.group(1)) if m else []
    reqs = tomllib.loads(text).get("build-system", {}).get("requires", [])
    return [str(r) for r in reqs]


def release(name: str) -> tuple[int, ...] | None:
    try:
        parts = re.findall(r"\d+", metadata.version(name))[:2]
    except metadata.PackageNotFoundError:
        return None
    return tuple(int(p) for p in parts)


def missing(reqs: list[str]) -> list[str]:
    out = []
    for req in reqs:
        name = NAME_RE.match(req)
        if ";" in req or not name:
            continue
        if name.group(1).lower() == "wheel" and (release("setuptools") or (0,)) >= (70, 1):
            continue  # setuptools 70.1 builds wheels itself (bdist_wheel): the wheel package is not imported
        try:
            metadata.distribution(name.group(1))
        except metadata.PackageNotFoundError:
            out.append(req)
    return out


def main(src: str) -> None:
    path = os.path.join(src, "pyproject.toml")
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        text = f.read()
    print("\n".join(missing(declared(text))))


if __name__ == "__main__":
    main(sys.argv[1])
