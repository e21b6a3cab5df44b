"""The package's import drawing, read from the source (issue 34): every module's imports, those under
`if TYPE_CHECKING:` and inside functions included, make a graph with no circle; and outside toolchain/target/
no code asks whether a runtime is the host (`.on_host`, `runtime == "host"`): the runtime's protocol, or a
function of toolchain.target, answers the question the branch was for."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "toolchain"
SKIP = ("demo_src",)  # the demo's sources: a project built into wheels, not the package's code


def modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's __init__)."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if any(s in rel.parts for s in SKIP):
            continue
        parts = list(rel.parts)
        is_pkg = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return found


def _known(name: str, mods: dict[str, tuple[Path, bool]]) -> str | None:
    """`name`, or the nearest enclosing module of the package that exists (`a.b.func` -> `a.b`)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, mods: dict[str, tuple[Path, bool]]) -> set[str]:
    path, is_pkg = mods[name]
    here = name if is_pkg else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:  # `from pkg import module` imports the module, else the package
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in mods else base)
    return {k for t in targets if t.startswith("toolchain") and (k := _known(t, mods)) and k != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(name, mods) for name in mods}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of more than one module, as one circle through it (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group: set[str] = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [_circle_in(sorted(g)[0], g, edges) for g in groups]


def _circle_in(start: str, group: set[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest path from `start` back to itself within `group` (breadth first)."""
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for v in frontier:
            for w in sorted(edges[v] & group):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w not in came:
                    came[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in no circle of {sorted(group)}")


def test_the_graph_is_read_from_the_source():
    """The drawing holds what the code says: arrows it must have, under TYPE_CHECKING and inside functions."""
    edges = graph()
    assert "toolchain.core.proc.runner" in edges["toolchain.target.base"]  # a plain import
    assert "toolchain.target.base" in edges["toolchain.build.plan"]  # `from toolchain.target.base import Runtime`
    assert "toolchain.target.container.presence" in edges["toolchain.target"]  # inside a function
    assert "toolchain.scripts" in edges["toolchain.target.parts"]  # `from toolchain import scripts`


def test_the_circle_finder_finds_a_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert circles(edges) == [["a", "b", "c", "a"]]


# Circles known and left to their owners (issue 34): the finder still finds each (the test below fails when one
# is gone, so the entry goes too), and no other circle may appear.
KNOWN: list[list[str]] = []  # none left (issue 34): a new circle fails the test below


def test_no_module_imports_itself_round_a_circle():
    found = [c for c in circles(graph()) if c not in KNOWN]
    assert found == [], "import circles (type-only imports included):\n" + "\n".join(
        " -> ".join(c) for c in found)


def test_each_known_circle_is_still_there():
    found = circles(graph())
    assert [c for c in KNOWN if c not in found] == [], "a known circle is gone: remove it from KNOWN"


def test_target_base_and_parts_import_one_way():
    """The protocols (base) name what a build is handed (parts); parts names no runtime."""
    edges = graph()
    assert "toolchain.target.parts" in edges["toolchain.target.base"]
    assert "toolchain.target.base" not in edges["toolchain.target.parts"]


def _asks_if_host(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "on_host":
        return True
    if isinstance(node, ast.Compare):  # `spec.runtime == "host"`, `(t.runtime or "host") != "host"`, ...
        sides = [node.left, *node.comparators]
        names = {n.attr if isinstance(n, ast.Attribute) else n.id for s in sides for n in ast.walk(s)
                 if isinstance(n, ast.Attribute | ast.Name)}
        return "runtime" in names and any(isinstance(s, ast.Constant) and s.value == "host" for s in sides)
    return False


def test_only_the_target_asks_whether_a_runtime_is_the_host():
    """Outside toolchain/target/ a runtime is asked to act (tests/test_where_it_runs.py), never whether it is
    the host. toolchain/recipe/ reads the recipe's `runtime` key itself: it validates the
    value, below the target layer."""
    found = []
    for name, (path, _) in modules().items():
        if name.startswith(("toolchain.target.", "toolchain.recipe.")) or name == "toolchain.target":
            continue
        found += [f"{path.relative_to(PACKAGE.parent)}:{n.lineno}" for n in ast.walk(ast.parse(path.read_text()))
                  if isinstance(n, ast.expr) and _asks_if_host(n)]
    assert found == [], "ask the runtime (toolchain/target/) instead:\n" + "\n".join(found)


def test_the_host_question_is_recognized():
    code = 'if runtime.on_host or spec.runtime == "host" or "host" != runtime or (t.runtime or "host") != "host": pass'
    assert len([n for n in ast.walk(ast.parse(code)) if _asks_if_host(n)]) == 4
    assert not [n for n in ast.walk(ast.parse('if verdict == "host" or runtime.sees_host_paths: pass'))
                if _asks_if_host(n)]


def test_the_shared_patterns_are_written_once():
    """A sha256, a full commit id and credentials in a URL are matched by the patterns of core/regex.py; a file
    run in a target (toolchain/scripts/, build/intarget.py: stdlib only) may write its own."""
    written = ("[0-9a-f]{64}", "[0-9a-f]{40}", "://[^/?#]*@")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in ("core/regex.py", "build/intarget.py") or rel.startswith(("scripts/", "demo_src/")):
            continue
        text = path.read_text(encoding="utf-8")
        found += [f"{rel}: {w}" for w in written if w in text]
    assert found == [], "use toolchain.core.regex (SHA256, SHA256_HEX, COMMIT_ID, URL_CREDENTIALS):\n" + "\n".join(found)
