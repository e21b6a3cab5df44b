"""Callers outside `target/` ask the runtime to act (run, copy in and out, name itself in a message) instead of
asking where it is. The names that ask are kept out of the rest of the package by reading its source: each
use left is listed below with the module it is in, and the list only shrinks (a use that is gone must leave
the list too, so that it cannot come back unnoticed)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "toolchain"
# the five capability booleans of a runtime, and the spec-level questions of target/__init__.py
ASKING = frozenset({"sees_host_paths", "named_in_messages", "workspaces_at_once", "inherits_resources",
                    "venvs_see_image_packages", "in_container", "from_image", "inherits_environment", "is_host",
                    "on_host"})
# what is left to turn into the runtime doing the thing (issue 43 item 2): module -> uses (none is left)
LEFT: dict[str, int] = {}


def _uses(source: str) -> int:
    count = 0
    for node in ast.walk(ast.parse(source)):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        if name in ASKING:
            count += 1
        elif isinstance(node, ast.ImportFrom):
            count += sum(alias.name in ASKING for alias in node.names)
    return count


def test_the_walk_counts_attributes_names_and_imports() -> None:
    source = ("from toolchain.target import in_container, make_runtime\n"
              "if runtime.sees_host_paths and in_container(spec):\n    pass\n")
    assert _uses(source) == 3
    assert _uses("runtime.run(['true'])\nprint(runtime.said('in the {where}'))\n") == 0


def test_callers_outside_target_do_not_ask_where_they_run() -> None:
    found: Counter[str] = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(("target/", "demo_src/", "scripts/")):
            continue
        n = _uses(path.read_text(encoding="utf-8"))
        if n:
            found[rel] = n
    grown = {m: n for m, n in found.items() if n > LEFT.get(m, 0)}
    assert not grown, (f"asks where it runs (ask the runtime to do the thing instead, toolchain/target/base.py): "
                       f"{grown}")
    shrunk = {m: (LEFT[m], found.get(m, 0)) for m in LEFT if found.get(m, 0) < LEFT[m]}
    assert not shrunk, f"fewer uses than listed (lower LEFT to what remains): {shrunk}"
