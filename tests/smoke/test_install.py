"""Install from a lock: hashes first, a fresh venv, lock order, kernel wheels --no-deps --force-reinstall,
installed versions checked before anything is served. Uses tiny real wheels built with `pip wheel`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.smoke.smoke_helpers import fault_cmd, write_test_lock
from toolchain.build.cache import WheelRef
from toolchain.core.fs import sha256_file
from toolchain.lock import LockedComponent, read_lock
from toolchain.smoke import install
from toolchain.target import HostRuntime, Interpreter

SMOKE = {"model": "fault-model", "cases": ["models", "math"]}
pytestmark = pytest.mark.slow


def _project(root: Path, name: str, version: str, requires: list[str]) -> Path:
    src = root / name
    pkg = src / name.replace("-", "_")
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"VERSION = {version!r}\n")
    deps = ", ".join(json.dumps(r) for r in requires)
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\ndependencies = [{deps}]\n')
    return src


def _isolation_args() -> list[str]:
    """Build without isolation when this interpreter's setuptools can make wheels by itself (>= 70.1, no
    `wheel` package needed); otherwise let pip fetch setuptools into an isolated build environment."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version
    try:  # (its metadata, not an import: setuptools' distutils shim stands aside in a process that looked up pip)
        return ["--no-build-isolation"] if Version(version("setuptools")) >= Version("70.1") else []
    except PackageNotFoundError:
        return []


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """tinyvllm 1.0.0 (the 'vLLM'), tinykernels 0.2.0+xpu (needs a dependency no index has) and 0.1.0."""
    root = tmp_path_factory.mktemp("wheelsrc")
    out = root / "dist"
    specs = {"vllm": ("tinyvllm", "1.0.0", []),
             "kernels": ("tinykernels", "0.2.0+xpu", ["toolchain-test-missing-dependency==9.9.9"]),
             "kernels-old": ("tinykernels", "0.1.0", [])}
    built = {}
    for key, (name, version, requires) in specs.items():
        src = _project(root / key, name, version, requires)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *_isolation_args(),
                        "-q", str(src), "-w", str(out / key)], check=True, timeout=300)
        built[key] = next((out / key).glob("*.whl"))
    return built


def _component(name: str, wheel: Path, dist: str, install_args=()) -> LockedComponent:
    return LockedComponent(
        name=name, url=f"https://example.invalid/{name}.git", ref="main", commit="a" * 40, describe="v1",
        subdir="", after=(), dist=dist, import_name=dist, version="", install_args=tuple(install_args),
        patches=(), env={}, command=("{python}", "-m", "pip", "wheel"), cache_key="ab" * 32, build_seconds=1.0,
        wheel=WheelRef(wheel.name, sha256_file(wheel), wheel.stat().st_size))


def _lock(tmp_path: Path, wheels: dict[str, Path], kernels: str = "kernels") -> Path:
    lock_dir = tmp_path / "dist"
    (lock_dir / "wheels").mkdir(parents=True)
    comps = []
    for name, key, dist in (("vllm", "vllm", "tinyvllm"), ("vllm-xpu-kernels", kernels, "tinykernels")):
        target = lock_dir / "wheels" / wheels[key].name
        target.write_bytes(wheels[key].read_bytes())
        comps.append(_component(name, target, dist, [] if name == "vllm" else ["--no-deps", "--force-reinstall"]))
    return write_test_lock(lock_dir, SMOKE, comps)


def _versions(python: str) -> dict:
    return install.installed_versions(Interpreter(HostRuntime(), python), ["tinyvllm", "tinykernels"])


def test_install_plan_order_and_kernel_args(tmp_path, wheels):
    lock = read_lock(_lock(tmp_path, wheels))
    plan = install.install_plan(lock)
    assert [s.component for s in plan] == ["vllm", "vllm-xpu-kernels"]
    assert plan[0].args == ()
    assert plan[1].args == ("--no-deps", "--force-reinstall")


def test_a_lock_without_closure_whose_wheels_need_dependencies_is_refused(smoke, tmp_path, wheels, monkeypatch):
    """No resolved closure, and tinykernels needs a distribution the lock does not pin: an error (exit 2) that
    names it and says how to pin it, never a download; nothing is served."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    lock = _lock(tmp_path, wheels)
    dump = tmp_path / "env.json"
    r = smoke("--lock", str(lock), "--serve-cmd", fault_cmd("healthy", "--env-out", str(dump), python="{python}"),
              "--ready-timeout", "120")
    assert r.code == 2, r.stdout
    out = json.loads(r.stdout)
    assert out["kind"] == "UnlockedDependencies"
    assert "records no resolved closure" in out["error"]
    assert "toolchain-test-missing-dependency" in out["error"]
    assert "nothing was downloaded" in out["error"]
    assert f"toolchain lock --lock {lock}" in out["hint"]
    assert "--allow-unlocked-deps" in out["hint"]
    assert not dump.exists()
    assert r.report["exit_code"] == 2
    assert r.report["install"]["unlocked"] is False
    log = (r.out / "install.log").read_text()
    assert "--no-index --no-deps --require-hashes" in log
    assert "pip check" in log


def test_lock_to_fresh_venv_to_served_cases(smoke, tmp_path, wheels, monkeypatch):
    """--allow-unlocked-deps: lock order, the kernel wheel --no-deps --force-reinstall; the run is marked unlocked."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # nothing may come from an index
    lock = _lock(tmp_path, wheels)
    dump = tmp_path / "env.json"
    r = smoke("--lock", str(lock), "--serve-cmd", fault_cmd("healthy", "--env-out", str(dump), python="{python}"),
              "--ready-timeout", "120", "--keep-venv", "--allow-unlocked-deps")
    assert r.code == 0, r.stdout
    assert r.report["install"]["unlocked"] is True
    assert r.report["install"]["environment"]["resolved"] is False
    assert "**Unlocked:**" in (r.out / "summary.md").read_text()
    venv = r.out / "venv"
    assert r.report["install"]["venv_state"] == f"kept: the venv is at {venv} (--keep-venv)"
    assert r.report["served"]["same_as_verified"] is True
    assert r.report["served"]["program"] == str(venv / "bin/python")
    assert "from the environment whose versions were checked" in (r.out / "summary.md").read_text()
    assert _versions(str(venv / "bin" / "python")) == {"tinyvllm": "1.0.0", "tinykernels": "0.2.0+xpu"}
    inst = r.report["install"]
    assert [s["component"] for s in inst["steps"]] == ["vllm", "vllm-xpu-kernels"]
    assert all(v["ok"] for v in inst["versions"])
    log = (r.out / "install.log").read_text()
    assert log.index("tinyvllm-1.0.0") < log.index("tinykernels-0.2.0")
    assert "--no-deps --force-reinstall" in log.splitlines()[next(i for i, line in enumerate(log.splitlines())
                                                              if line.startswith("$ ") and "tinykernels" in line)]
    # the server ran from the fresh venv
    assert json.loads(dump.read_text())["prefix"] == str(venv)


def test_a_serve_command_outside_the_venv_is_said_and_the_venv_removed(smoke, tmp_path, wheels, monkeypatch):
    """--serve-cmd with another interpreter: the report says what was served and what was verified (not
    "versions match" alone); the fresh venv does not stay behind."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    lock = _lock(tmp_path, wheels, kernels="kernels-old")  # no closure, and no wheel needs a dependency
    dump = tmp_path / "env.json"
    r = smoke("--lock", str(lock), "--serve-cmd", fault_cmd("healthy", "--env-out", str(dump)), "--cases", "math",
              "--ready-timeout", "120")
    assert r.code == 0, r.stdout
    venv = r.out / "venv"
    served = r.report["served"]
    assert served["program"] == sys.executable
    assert served["verified"] == str(venv / "bin" / "python")
    assert served["same_as_verified"] is False
    assert "says nothing about what was served" in served["note"]
    assert json.loads(dump.read_text())["prefix"] != str(venv)  # indeed served from elsewhere
    summary = (r.out / "summary.md").read_text()
    assert f"- served: `{sys.executable}` — **not** the checked environment `{venv}/bin/python`" in summary
    assert not venv.exists()
    assert r.report["install"]["venv_state"] == f"removed: the venv {venv} (pass --keep-venv to keep it)"
    assert (r.out / "install.log").is_file()


def test_tampered_wheel_stops_before_the_venv(smoke, tmp_path, wheels):
    lock = _lock(tmp_path, wheels)
    kernel = next((tmp_path / "dist" / "wheels").glob("tinykernels-*.whl"))
    kernel.write_bytes(kernel.read_bytes() + b"tampered")
    dump = tmp_path / "env.json"
    r = smoke("--lock", str(lock), "--serve-cmd", fault_cmd("healthy", "--env-out", str(dump)))
    assert r.code == 1
    error = json.loads(r.stdout)["error"]
    assert "vllm-xpu-kernels" in error
    assert "sha256" in error
    assert not (r.out / "venv").exists()
    assert not dump.exists()
    assert "Stopped before serving" in (r.out / "summary.md").read_text()


def test_version_mismatch_in_an_existing_env_stops_before_serving(smoke, tmp_path, wheels, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    env = install.create_venv(sys.executable, tmp_path / "old-env", tmp_path / "venv.log")
    subprocess.run([env.python, "-m", "pip", "install", "-q", "--no-deps", str(wheels["vllm"]),
                    str(wheels["kernels-old"])], check=True, timeout=300)
    lock = _lock(tmp_path, wheels)
    dump = tmp_path / "env.json"
    r = smoke("--lock", str(lock), "--no-install", "--python", env.python,
              "--serve-cmd", fault_cmd("healthy", "--env-out", str(dump)))
    assert r.code == 1
    error = json.loads(r.stdout)["error"]
    assert "tinykernels (vllm-xpu-kernels): installed 0.1.0, the lock has 0.2.0+xpu" in error
    assert not dump.exists()
    versions = {v["dist"]: v for v in r.report["install"]["versions"]}
    assert versions["tinyvllm"]["ok"]
    assert not versions["tinykernels"]["ok"]
    junit = (r.out / "junit.xml").read_text()
    assert 'name="tinykernels"' in junit
    assert "the lock has 0.2.0+xpu" in junit


def test_the_demo_lock_has_no_server_to_smoke(smoke, demo_build):
    """Without a serve command, the demo's lock (no vLLM among its wheels) is refused up front, exit 2."""
    r = smoke("--lock", str(demo_build.lock_path), "--skip-device-check")
    assert r.code == 2
    out = json.loads(r.stdout)
    assert "the lock has no vLLM wheel" in out["error"]
    assert "offline demo" in out["error"]
    assert "cannot be smoked" in out["error"]
    assert "--serve-cmd" in out["hint"]
    assert "--no-install" in out["hint"]
    assert not r.out.exists()  # nothing was installed or served


def test_smoke_from_the_demo_build_lock(smoke, demo_build, tmp_path, monkeypatch):
    """A lock written by `toolchain build --recipe demo` (the build spine): installed and served."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    dump = tmp_path / "env.json"
    r = smoke("--lock", str(demo_build.lock_path), "--skip-device-check", "--cases", "models,math",
              "--serve-cmd", fault_cmd("healthy", "--env-out", str(dump), "--served-model-name", "{model}",
                                       python="{python}"), "--ready-timeout", "120", "--keep-venv")
    assert r.code == 0, r.stdout
    locked = demo_build.lock()["components"]
    deps = [d["name"] for d in demo_build.lock()["dependencies"]]
    steps = r.report["install"]["steps"]  # the locked files, dependencies first, all hashed, none from an index
    assert [s["component"] for s in steps] == deps + [c["name"] for c in locked]
    assert all(s["args"] == list(install.CLOSURE_ARGS) for s in steps)
    assert r.report["install"]["unlocked"] is False
    assert r.report["install"]["environment"]["ok"] is True
    assert {v["dist"] for v in r.report["install"]["versions"] if v["ok"]} == {c["dist"] for c in locked}
    assert r.report["device"]["skipped"]
    assert r.report["recipe"] == "demo"
    assert json.loads(dump.read_text())["prefix"] == str(r.out / "venv")
