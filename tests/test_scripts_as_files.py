"""Scripts are files. What runs in a target (the host, a container) is a file of toolchain/scripts (or
toolchain/build/intarget.py), run by path, read by mypy and ruff; no string literal of the package holds a
script.

The rule, precisely: in every module of the package (the demo's sources aside), no string that is not a
docstring has 8 lines or more and is code. A string is: a literal (adjacent literals are one), an f-string
(its placeholders read as a name), or `SEP.join([...])` / `SEP.join((...))` of literals. It is code when it
parses as Python with a statement that is not a bare expression, when two of its lines begin as Python
statements do (import, from ... import, def, class, for ... in ...:, if ...:, try:, with ...:, print(): a
template that does not parse as it stands), or when it reads as a shell script (a loop or
test with its `do`/`then`, `$(...)`, `${...}`, `;;`, `done`/`fi`/`esac` on a line, or a line starting with a
shell command such as set, export, source, exec, echo, printf)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import toolchain
from tests.support.fakehost import B60, B70, FakeCard, FakeHost
from tests.support.old_pythons import old_pythons
from toolchain import scripts

PACKAGE = Path(toolchain.__file__).resolve().parent
MIN_LINES = 8
SHELL_RE = re.compile(r"^\s*(for|while|until|if)\b.*(\bdo\b|\bthen\b)|\$\(|\$\{|;;|^\s*(done|fi|esac)\s*;?\s*$"
                      r"|^\s*(set|export|source|exec|echo|printf|cd)\s", re.M)
# lines that begin as Python statements do, for a script that does not parse as it stands (a template)
PYTHON_RE = re.compile(r"^\s*(import \w|from [\w.]+ import |def \w+\(|class \w+|for .+ in .+:$|if .+:$|try:$|with .+:$"
                       r"|print\()", re.M)
SCRIPT_FILES = sorted(p for p in scripts.FOLDER.glob("*.py") if p.name != "__init__.py")


def is_script(text: str) -> bool:
    if len(text.strip("\n").splitlines()) < MIN_LINES:
        return False
    try:
        tree = ast.parse(textwrap.dedent(text))
    except (SyntaxError, ValueError):
        tree = None
    if tree is not None and any(not isinstance(stmt, ast.Expr) for stmt in tree.body):
        return True
    return len(PYTHON_RE.findall(text)) >= 2 or bool(SHELL_RE.search(text))


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _text(node: ast.AST) -> str | None:
    """The string `node` makes, as the rule reads it; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "PLACEHOLDER" for v in node.values)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)
            and len(node.args) == 1 and isinstance(node.args[0], ast.List | ast.Tuple)):
        parts = [_text(e) for e in node.args[0].elts]
        if all(p is not None for p in parts):
            return node.func.value.value.join(p for p in parts if p is not None)
    return None


def embedded_scripts(source: str) -> list[int]:
    """The lines where a string of `source` holding a script starts."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.expr) or id(node) in docs:
            continue
        text = _text(node)
        if text is not None and is_script(text):
            found.append(node.lineno)
    return sorted(set(found))


def test_no_string_in_the_package_holds_a_script():
    modules = [p for p in PACKAGE.rglob("*.py") if "demo_src" not in p.relative_to(PACKAGE).parts]
    assert len(modules) > 100
    found = [f"{p.relative_to(PACKAGE.parent)}:{line}" for p in modules
             for line in embedded_scripts(p.read_text(encoding="utf-8"))]
    assert found == [], "move each script into toolchain/scripts and run it as a file (Runtime.script)"


def test_the_rule_finds_scripts_in_every_form_it_names():
    python = "\n".join(["import json, sys", "out = {}", "for name in sys.argv[1:]:", "    out[name] = len(name)",
                        "if not out:", "    sys.exit(1)", "print(json.dumps(out))", "sys.exit(0)"])
    shell = "\n".join(["for d in /sys/class/drm/card*; do", '  n=${d##*/}', '  case $n in *-*) continue;; esac',
                       '  [ -e "$d/device" ] || continue', '  v=0', '  [ -e "/dev/dri/$n" ] && v=1',
                       '  echo "$n|$v"', "done"])
    prose = "\n".join(f"line {i} of a help text: it says what the command does, for whom and why" for i in range(12))
    source = textwrap.dedent(f'''\
        """A module docstring may show a script:
        {textwrap.indent(python, "        ").lstrip()}
        """
        PY = {python!r}
        SH = {shell!r}
        JOINED = "\\n".join({python.splitlines()!r})
        def f(x):
            return f{(python.replace("{}", "{{}}") + chr(10) + "print({x})")!r}
        HELP = {prose!r}
        SHORT = {chr(10).join(python.splitlines()[:7])!r}
        TEMPLATE = {python.replace("sys.argv[1:]", "@NAMES@")!r}.replace("@NAMES@", "()")
        ''')
    lines = source.splitlines()
    assert embedded_scripts(source) == [next(i + 1 for i, line in enumerate(lines) if line.startswith(name))
                                        for name in ("PY", "SH", "JOINED", "    return", "TEMPLATE")]


@pytest.mark.parametrize("script", SCRIPT_FILES, ids=lambda p: p.name)
def test_each_script_is_stdlib_only_python_3_8_run_as_a_file(script):
    source = script.read_text(encoding="utf-8")
    tree = ast.parse(source, feature_version=(3, 8))
    assert "from __future__ import annotations" in source  # annotations unevaluated under an old Python
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
    assert 'if __name__ == "__main__":' in source
    # a script named like a stdlib module would shadow it for the others (a script's folder is first on sys.path)
    assert script.stem not in sys.stdlib_module_names


def _run(python: str, name: str, *args: str) -> str:
    done = subprocess.run([python, str(scripts.path(name)), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _version(python: str) -> str:
    return subprocess.run([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.slow
@pytest.mark.parametrize("python", [sys.executable, *old_pythons()], ids=lambda exe: Path(exe).name)
def test_the_scripts_answer_under_each_python(python, tmp_path):
    version = _version(python)
    probe = json.loads(_run(python, "interpreter.py"))
    assert probe["python_version"] == version
    assert probe["pip_version"]
    assert probe["python_tag"] == "cp" + "".join(version.split(".")[:2])

    found = json.loads(_run(python, "dists.py", "--abi", "pip", "no-such-dist"))
    assert found["no-such-dist"] is None
    assert found["pip"]["version"] == probe["pip_version"]
    assert found["pip"]["cxx11-abi"] == ""  # pip ships no libc10

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "pyproject.toml").write_text('[build-system]\nrequires = ["pip>=1", "no-such-dist>=2", '
                                         '"other; python_version < \'3\'"]\n')
    assert _run(python, "build_requires.py", str(tree)).split() == ["no-such-dist>=2"]
    assert _run(python, "build_requires.py", str(tmp_path)) == ""  # no pyproject.toml

    image = json.loads(_run(python, "base_image.py"))
    assert image["python-version"] == version
    pip = next(d for d in image["dists"] if d["name"] == "pip")
    assert pip["version"] == probe["pip_version"]
    assert re.fullmatch(r"[0-9a-f]{64}", pip["record-sha256"])

    installed = json.loads(_run(python, "installed.py"))
    assert any(d["name"] == "pip" and d["version"] == probe["pip_version"] for d in installed)

    lib, oneapi = tmp_path / "lib", tmp_path / "oneapi"
    for folder, name in ((lib, "libtoolchaintest.so.1"), (oneapi, "libsycl-test.so.9")):
        folder.mkdir()
        (folder / name).write_bytes(b"")
    libs = json.loads(_run(python, "libraries.py", f"/nonexistent:{lib}", str(oneapi)))
    assert libs["system"]["libtoolchaintest.so.1"] == str(lib / "libtoolchaintest.so.1")
    assert libs["oneapi"] == {"libsycl-test.so.9": str(oneapi)}
    assert libs["installed"] == {}

    root = FakeHost(cards=[FakeCard(B60), FakeCard(B70), FakeCard(0x1234, vendor=0x10DE)]).make(tmp_path / "root")
    (root / "dev/dri/card1").write_text("")  # only card1's node is there
    rows = json.loads(_run(python, "cards.py", str(root)))
    assert [(r["node"], r["vendor"], r["device"], r["driver"], r["visible"]) for r in rows] == [
        ("card0", 0x8086, B60, "xe", False), ("card1", 0x8086, B70, "xe", True), ("card2", 0x10DE, 0x1234, "xe", False)]
    assert rows[0]["slot"] == "0000:03:00.0"

    torch = json.loads(_run(python, "torch_xpu.py", "pip"))
    assert torch["versions"] == {"pip": probe["pip_version"]}
    assert torch["python"]

    venv = tmp_path / "venv"
    _run(python, "make_venv.py", str(venv))
    made = subprocess.run([str(venv / "bin/python"), "-c", "import sys; print(sys.prefix != sys.base_prefix)"],
                          capture_output=True, text=True, check=True)
    assert made.stdout.strip() == "True"
