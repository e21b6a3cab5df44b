"""The default build command, `pip wheel --no-build-isolation --no-deps {src} -w {out}`, made as the one
backend call pip makes, without pip (toolchain/build/frontend.py, the runner's `pep517`): the same wheel
bytes as pip's, pip itself wherever a setting would make pip do more, and pip's refusals kept. Real git,
real builds (setuptools' own backend and the tiny in-tree one), real pip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spine_helpers import BACKEND, PACKAGES, component, recipe_data
from toolchain.build.frontend import PEP517_FILE

DIRECT = "# toolchain: the command as pip runs it"
PIP_ITSELF = "# toolchain: running the command as written, pip itself"
FORCE_PIP = {"PIP_NO_CLEAN": "1"}  # a pip setting outside the harmless ones: pip runs itself


def _log(ws, out: str, name: str) -> str:
    return (ws.root / out / "logs" / f"{name}.log").read_text()


def _wheel(ws, out: str) -> Path:
    (wheel,) = (ws.root / out / "wheels").glob("*.whl")
    return wheel


@pytest.mark.parametrize("package", ["plainsetup", "tiny", "legacysetup"])
def test_the_default_command_builds_the_bytes_pip_wheel_builds(ws, make_repo, package):
    """setuptools.build_meta, an in-tree backend found through backend-path, and a setup.py whose pyproject.toml
    has no [build-system] (pip's setuptools.build_meta:__legacy__): built directly and by pip (each into a cache
    of its own, from the same commit), the wheels are the same file."""
    repo = make_repo(package, package)
    ws.recipe("r", recipe_data({package: component(repo)}))
    direct = ws.build("r", "direct", cache=ws.root / "cache-direct")
    assert direct.returncode == 0, str(direct)
    by_pip = ws.build("r", "pip", cache=ws.root / "cache-pip", env=FORCE_PIP)
    assert by_pip.returncode == 0, str(by_pip)
    assert DIRECT in _log(ws, "direct", package) and PIP_ITSELF not in _log(ws, "direct", package)
    if package == "legacysetup":
        assert "the PEP 517 backend setuptools.build_meta:__legacy__'s build_wheel" in _log(ws, "direct", package)
    assert f"{PIP_ITSELF}: PIP_NO_CLEAN is set" in _log(ws, "pip", package)
    assert "Successfully built" in _log(ws, "pip", package)  # pip's own words: pip ran
    assert _wheel(ws, "direct").name == _wheel(ws, "pip").name
    assert _wheel(ws, "direct").read_bytes() == _wheel(ws, "pip").read_bytes()
    assert ws.lock("direct")["components"][0]["wheel"] == ws.lock("pip")["components"][0]["wheel"]


def test_another_command_runs_as_written(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    command = ["{python}", "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "{src}", "-w", "{out}"]
    ws.recipe("r", recipe_data({"tiny": component(repo, command=command)}))
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    log = _log(ws, "out", "tiny")
    assert "pep517" not in log and DIRECT not in log and "Successfully built" in log


def test_a_requires_python_the_target_lacks_fails_as_under_pip(ws, make_repo):
    repo = make_repo("plainsetup", "plainsetup")
    text = (repo.path / "pyproject.toml").read_text().replace('requires-python = ">=3.8"', 'requires-python = "<3"')
    repo.commit("drop Python 3", {"pyproject.toml": text})
    ws.recipe("r", recipe_data({"plainsetup": component(repo)}))
    r = ws.build("r")
    assert r.returncode == 1, str(r)
    version = ".".join(map(str, sys.version_info[:3]))
    assert f"Package 'plainsetup' requires a different Python: {version} not in '<3'" in r.json()["error"]
    assert not list((ws.cache / "wheels").rglob("entry.json"))
    by_pip = ws.build("r", "pip", cache=ws.root / "cache-pip", env=FORCE_PIP)  # pip refuses it too
    assert by_pip.returncode == 1, str(by_pip)
    assert f"requires a different Python: {version} not in '<3'" in _log(ws, "pip", "plainsetup")


# ---- the runner's choice, run as the build runs it -------------------------------------------------------

def _tiny_tree(tmp_path: Path) -> Path:
    import shutil

    src = tmp_path / "tiny"
    shutil.copytree(PACKAGES / "tiny", src)
    shutil.copyfile(BACKEND, src / BACKEND.name)
    return src


def _pep517(src: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """build/pep517call.py on `src`, with a fallback that only says it ran (what it stands for: pip)."""
    out = src.parent / "out"
    out.mkdir(exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    argv = [sys.executable, str(PEP517_FILE), str(out), "tiny_backend", str(src), "--",
            sys.executable, "-c", "print('FALLBACK RAN')"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return subprocess.run(argv, cwd=src, env={**clean, "PIP_CONFIG_FILE": os.devnull, **env}, capture_output=True,
                          text=True, timeout=120)


def test_harmless_pip_settings_keep_the_direct_call(tmp_path):
    src = _tiny_tree(tmp_path)
    done = _pep517(src, {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_CACHE_DIR": "1",
                         "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert done.returncode == 0, done.stderr
    assert DIRECT in done.stdout and "FALLBACK RAN" not in done.stdout
    assert [w.name for w in (tmp_path / "out").glob("*.whl")] == ["tiny-1.0.0-py3-none-any.whl"]


@pytest.mark.parametrize("setting", ["env", "config"])
def test_a_pip_setting_that_changes_the_build_leaves_it_to_pip(tmp_path, setting):
    src = _tiny_tree(tmp_path)
    if setting == "env":
        env = {"PIP_CONFIG_SETTINGS": "--build-option=--plat-name=x"}
        reason = "PIP_CONFIG_SETTINGS is set"
    else:
        conf = tmp_path / "pip.conf"
        conf.write_text("[global]\nindex-url = http://127.0.0.1:9/simple\n[wheel]\nbuild_option = --universal\n")
        env, reason = {"PIP_CONFIG_FILE": str(conf)}, f"{conf} sets build_option in [wheel]"
    done = _pep517(src, env)
    assert done.returncode == 0, done.stderr
    assert f"{PIP_ITSELF}: {reason}" in done.stdout and "FALLBACK RAN" in done.stdout
    assert not list((tmp_path / "out").glob("*.whl"))


def test_pip_constraints_on_the_project_are_checked_as_pip_checks_them(tmp_path):
    src = _tiny_tree(tmp_path)
    constraints = tmp_path / "constraints.txt"
    nested = tmp_path / "more.txt"
    constraints.write_text(f"torch<=2.14.1  # another project's cap\n-c {nested.name}\n")
    for line, ok in (("tiny>=1", True), ("tiny<1", False), ("tiny<1; python_version < '3'", True)):
        nested.write_text(line + "\n")
        done = _pep517(src, {"PIP_CONSTRAINT": str(constraints)})
        wheels = list((tmp_path / "out").glob("*.whl"))
        assert "FALLBACK RAN" not in done.stdout, line
        if ok:
            assert done.returncode == 0 and len(wheels) == 1, (line, done.stderr)
        else:
            assert done.returncode == 1 and not wheels, line
            assert f"ERROR: Cannot build tiny==1.0.0: the constraint 'tiny<1' in {nested}" in done.stderr
    nested.write_text("tiny @ file:///elsewhere\n")  # more than a named version: pip decides
    done = _pep517(src, {"PIP_CONSTRAINT": str(constraints)})
    assert "FALLBACK RAN" in done.stdout and "holds more than named versions" in done.stdout


@pytest.mark.parametrize("project", ["default", "says-deflated"])
def test_setuptools_writes_the_wheel_uncompressed_when_the_tool_normalizes_it(tmp_path, project):
    """`--stored` (the tool normalizes the wheel after, compressing each entry): setuptools' bdist_wheel
    writes it uncompressed, unless the project's setup.cfg chooses its compression; without it, deflated."""
    import shutil
    import zipfile

    src = tmp_path / "legacysetup"
    shutil.copytree(PACKAGES / "legacysetup", src)
    if project == "says-deflated":
        (src / "setup.cfg").write_text("[bdist_wheel]\ncompression = deflated\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    methods = {}
    for stored in (True, False):
        out = tmp_path / f"out-{stored}"
        out.mkdir()
        argv = [sys.executable, str(PEP517_FILE), *(["--stored"] if stored else []), str(out),
                "setuptools.build_meta:__legacy__", "", "--", sys.executable, "-c", "print('FALLBACK RAN')"]
        done = subprocess.run(argv, cwd=src, env={**clean, "PIP_CONFIG_FILE": os.devnull}, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0 and "FALLBACK RAN" not in done.stdout, done.stderr
        shutil.rmtree(src / "build", ignore_errors=True)
        (wheel,) = out.glob("*.whl")
        with zipfile.ZipFile(wheel) as z:
            methods[stored] = {i.compress_type for i in z.infolist() if not i.is_dir()}
    assert methods[False] == {zipfile.ZIP_DEFLATED}
    assert methods[True] == ({zipfile.ZIP_STORED} if project == "default" else {zipfile.ZIP_DEFLATED})
