"""The in-target script (`toolchain/build/intarget.py`) runs under whatever python3 a target image has, as
`python -c SOURCE`: it must stay valid Python 3.9 (its annotations are strict-typed for mypy, unevaluated at
run time through `from __future__ import annotations`). Checked by the 3.9 grammar always, and by running it
under each Python 3.9 or 3.10 this machine has (on PATH, or installed by pyenv)."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from tests.support.old_pythons import old_pythons
from toolchain.build.metrics import RUNNER_FILE

SOURCE = RUNNER_FILE.read_text(encoding="utf-8")


def test_the_in_target_script_is_python_3_9_grammar():
    ast.parse(SOURCE, feature_version=(3, 9))
    assert SOURCE.lstrip().startswith('"""')
    assert "from __future__ import annotations" in SOURCE


@pytest.mark.parametrize("python", old_pythons() or [pytest.param("", marks=pytest.mark.skip(
    reason="no Python 3.9 or 3.10 on this machine"))], ids=lambda exe: Path(exe).name or "none")
def test_the_in_target_script_reads_resources_and_measures_a_build_under_an_old_python(python, tmp_path):
    done = subprocess.run([python, "-c", SOURCE, "resources"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    readings = json.loads(done.stdout)
    assert readings["cpus"] >= 1
    assert "proc/meminfo" in readings["files"]
    result = tmp_path / "result.json"
    done = subprocess.run([python, "-c", SOURCE, "build", str(result), "--", "sh", "-c", "exit 3"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    measured = json.loads(result.read_text())
    assert measured["returncode"] == 3
    assert measured["compiler_cache"]["launcher"] == "none"
    assert measured["metrics"]["wall_seconds"] >= 0


def test_the_link_cache_script_is_python_3_9_grammar():
    from toolchain.build.ccache import LINK_SCRIPT_FILE

    source = LINK_SCRIPT_FILE.read_text(encoding="utf-8")
    ast.parse(source, feature_version=(3, 9))
    assert "from __future__ import annotations" in source


@pytest.mark.parametrize("python", old_pythons() or [pytest.param("", marks=pytest.mark.skip(
    reason="no Python 3.9 or 3.10 on this machine"))], ids=lambda exe: Path(exe).name or "none")
def test_the_link_cache_script_links_and_reuses_under_an_old_python(python, tmp_path):
    import shutil

    from toolchain.build.ccache import LINK_SCRIPT_FILE

    if not shutil.which("cc"):
        pytest.skip("needs cc")
    (tmp_path / "main.c").write_text("int main(void) { return 5; }\n")
    subprocess.run(["cc", "-c", "main.c", "-o", "main.o"], cwd=tmp_path, check=True)
    env = {"PATH": "/usr/bin:/bin", "TOOLCHAIN_LINK_CACHE": str(tmp_path / "links"),
           "TOOLCHAIN_LINK_STATSLOG": str(tmp_path / "log")}
    for _ in range(2):
        (tmp_path / "main").unlink(missing_ok=True)
        done = subprocess.run([python, str(LINK_SCRIPT_FILE), "cc", "main.o", "-o", "main"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert subprocess.run([str(tmp_path / "main")]).returncode == 5
    assert [line.split()[0] for line in (tmp_path / "log").read_text().splitlines()] == ["miss", "hit"]
