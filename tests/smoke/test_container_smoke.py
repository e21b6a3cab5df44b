"""`toolchain smoke` for locks built in a podman container (issue 4 on top of issue 3).

The demo recipe is built in podman (fresh-image mode, and exec mode in a running container), then smoke
installs the lock's wheels inside the container and drives the stdlib fault server, which the recipe's
run-args (or the running container) mount at FAULTS. A probe directory mounted read-write at PROBE lets
the server write what it saw. Every test checks that no container the tool started is left behind.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.smoke.smoke_helpers import HERE, free_port
from tests.support.closure import build_standin_torch
from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixtures)
from tests.test_container_build import (
    build,
    engine_run,
    remove,
    tool_containers,
    wait_for,
    write_recipe,
)
from toolchain.core.fs import sha256_file
from toolchain.lock import wheel_name_version
from toolchain.smoke.install import CLOSURE_ARGS

pytestmark = [pytest.mark.container, pytest.mark.slow]

REPO = HERE.parent.parent
FAULTS = "/toolchain-test/faults"   # tests/smoke, read-only
PROBE = "/toolchain-test/probe"     # a directory of the test, read-write
STANDIN = REPO / "toolchain" / "demo_src" / "oneapi-standin"
# (deadlines that a healthy server meets at once, even in a container on a busy machine)
FAST = ("--skip-device-check", "--ready-timeout", "120", "--request-timeout", "120")
TEST_LABEL = "org.toolchain.test=container-smoke"


def mounts(probe: Path) -> list[str]:
    return ["--mount", f"type=bind,source={HERE},destination={FAULTS},readonly",
            "--mount", f"type=bind,source={probe},destination={PROBE}"]


def serve_cmd(mode: str = "healthy", *extra: str, shell: str = "") -> str:
    """--serve-cmd for the fault server inside the container ({python}: the container's venv)."""
    argv = ["{python}", f"{FAULTS}/fault_server.py", "--port", "{port}", "--mode", mode,
            "--served-model-name", "{model}", *extra]
    if shell:  # run through a shell that first runs `shell`
        return shlex.join(["bash", "-c", f"{shell} && exec {shlex.join(argv)}"])
    return shlex.join(argv)


def probe_dir(tmp: Path) -> Path:
    probe = tmp / "probe"
    probe.mkdir()
    probe.chmod(0o777)
    return probe


def locked_version(lock, component: str) -> str:
    return wheel_name_version(lock.component(component).wheel.file)[1]


def ps_in(container: str) -> str:
    script = 'for f in /proc/[0-9]*/cmdline; do tr "\\0" " " <"$f" 2>/dev/null; echo; done'
    return engine_run("podman", "exec", container, "sh", "-c", script).stdout


@pytest.fixture
def no_leftovers():
    yield
    left = tool_containers("podman")
    if left:
        remove("podman", *left)
    assert not left, f"containers left behind: {left}"


@pytest.fixture(scope="module")
def fresh(podman_image, tmp_path_factory):  # noqa: F811  (the imported fixture)
    """The demo built in a fresh podman container whose run-args mount the fault server, give the image
    oneAPI variables in its environment, and ask for no network (smoke serves on the host's)."""
    tmp = tmp_path_factory.mktemp("smoke-fresh")
    probe = probe_dir(tmp)
    run_args = [*mounts(probe), "-e", "ONEAPI_ROOT=/opt/intel/oneapi",
                "-e", "LD_LIBRARY_PATH=/opt/intel/oneapi/compiler/latest/lib:/usr/local/lib", "--network=none"]
    path = write_recipe(tmp, "smoke-in-podman", {"target": {"runtime": "podman", "image": podman_image,
                                                            "python": "python3", "run-args": run_args}})
    started = time.monotonic()
    lock = build(path, tmp, "fresh")
    print(f"fresh podman build of the demo: {time.monotonic() - started:.1f}s")
    return {"lock": lock, "probe": probe, "image": podman_image}


@pytest.fixture(scope="module")
def running(podman_image, tmp_path_factory):  # noqa: F811  (the imported fixture)
    """A running container (host network, fault server mounted) and the demo built in it by exec."""
    tmp = tmp_path_factory.mktemp("smoke-exec")
    probe = probe_dir(tmp)
    name = f"toolchain-test-smoke-{uuid.uuid4().hex[:8]}"
    start(name, podman_image, probe)
    try:
        path = write_recipe(tmp, "smoke-in-running", {"target": {"runtime": "podman", "container": name}})
        lock = build(path, tmp, "exec")
        yield {"lock": lock, "name": name, "probe": probe, "image": podman_image}
    finally:
        remove("podman", name)


def start(name: str, image: str, probe: Path, *extra: str, network: str = "host") -> None:
    engine_run("podman", "run", "--detach", "--name", name, "--label", TEST_LABEL, f"--network={network}",
               *mounts(probe), *extra, "--entrypoint", "sleep", image, "infinity")


def assert_locked_install(r, lock) -> None:
    """One `pip install --no-index --no-deps --require-hashes -r` in the container of the requirements file
    that names every locked file (dependencies, then built wheels) under /toolchain/wheels with its sha256;
    the environment report (read in the container) has each of them in the locked version and file."""
    inst = r.report["install"]
    deps = {d.name: d for d in lock.closure.dists}
    assert [s["component"] for s in inst["steps"]] == [*deps, *(c.name for c in lock.components)]
    assert inst["unlocked"] is False
    assert all(s["args"] == list(CLOSURE_ARGS) for s in inst["steps"])
    pip_lines = [ln for ln in (r.out / "install.log").read_text().splitlines()
                 if ln.startswith("$ ") and "pip install" in ln]
    assert len(pip_lines) == 1, pip_lines
    assert pip_lines[0].startswith("$ podman exec ")
    assert f" {r.report['target']['container']} " in pip_lines[0]
    assert "--no-index --no-deps --require-hashes" in pip_lines[0]
    assert pip_lines[0].endswith(" -r /toolchain/wheels/deps/requirements.lock.txt")
    reqs = (lock.path.parent / "wheels" / "deps" / "requirements.lock.txt").read_text().splitlines()
    want = [f"/toolchain/wheels/deps/{d.file} --hash=sha256:{d.sha256}" for d in deps.values()]
    want += [f"/toolchain/wheels/{c.wheel.file} --hash=sha256:{c.wheel.sha256}" for c in lock.components]
    assert reqs == want
    env = inst["environment"]
    assert env["resolved"] and env["ok"], env
    rows = {x["name"]: x for x in env["locked"]}
    assert {n: rows[n]["installed-sha256"] for n in deps} == {n: d.sha256 for n, d in deps.items()}


# ---- fresh-image mode ----------------------------------------------------------------------------------

def test_fresh_container_installs_the_wheels_and_serves(smoke, fresh, tmp_path, monkeypatch, no_leftovers):
    lock = fresh["lock"]
    secret = f"hf_{uuid.uuid4().hex}"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # reaches the container's pip: nothing may come from an index
    monkeypatch.setenv("TOOLCHAIN_KEEP_CONTAINERS", "1")  # kept to look inside afterwards, removed below
    dump = fresh["probe"] / "fresh-env.json"
    try:
        r = smoke("--lock", str(lock.path), *FAST, "--cases", "models,math,restart",
                  "--serve-cmd", serve_cmd("healthy", "--env-out", f"{PROBE}/{dump.name}"))
        kept = tool_containers("podman")
        assert r.code == 0, r.stdout
        assert len(kept) == 1 and kept[0].startswith("toolchain-smoke-"), kept
        name = kept[0]
        # the serving container ran the locked image, by its digest
        target = r.report["target"]
        assert target["mode"] == "image"
        assert target["container"] == name
        assert target["image_ref"] == f"{fresh['image'].rsplit(':', 1)[0]}@{lock.target.image_digest}"
        assert target["image_digest"] == lock.target.image_digest
        assert not target["notes"]
        labels = json.loads(engine_run("podman", "container", "inspect", "--format", "{{json .Config.Labels}}",
                                       name).stdout)
        assert labels["toolchain"] == "1"
        assert labels["toolchain.role"] == "smoke"
        # installed inside: exactly the lock's files (closure and built wheels), hashes required, no index
        inst = r.report["install"]
        assert_locked_install(r, lock)
        assert all(v["ok"] for v in inst["versions"])
        assert len(inst["versions"]) == len(lock.components)
        assert inst["python"] == "/toolchain/smoke/venv/bin/python"
        code = ("import demo_kernels, demo_engine, importlib.metadata as m; "
                "print(m.version('demo-kernels'), m.version('demo-engine'), demo_kernels.__file__)")
        kernels, engine, where = engine_run("podman", "exec", name, "/toolchain/smoke/venv/bin/python", "-c",
                                            code).stdout.split()
        assert (kernels, engine) == (locked_version(lock, "kernels"), locked_version(lock, "engine"))
        assert where.startswith("/toolchain/smoke/venv/lib/python3.11/site-packages/")  # the image's 3.11
        # the server ran in the container's venv with the smoke env and without the image's oneAPI variables
        seen = json.loads(dump.read_text())
        env = seen["env"]
        assert seen["prefix"] == "/toolchain/smoke/venv"
        assert env["VIRTUAL_ENV"] == "/toolchain/smoke/venv"
        assert env["PATH"].startswith("/toolchain/smoke/venv/bin:")
        assert env["ZE_AFFINITY_MASK"] == "0"
        assert env["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
        assert "ONEAPI_ROOT" not in env
        assert env["LD_LIBRARY_PATH"] == "/usr/local/lib"
        assert env["HF_TOKEN"] == secret
        assert "PIP_NO_INDEX" not in env
        assert not set(env) & {"PYTEST_CURRENT_TEST", "PYTHONPATH", "CONTAINERS_CONF"}  # nothing of the host's
        assert set(r.run["stripped_oneapi_vars"]) == {"ONEAPI_ROOT", "LD_LIBRARY_PATH"}
        # values went through the engine's environment, never its command line
        log = (r.out / "smoke" / "server.log").read_text()
        starts = [ln for ln in log.splitlines() if ln.startswith("### toolchain smoke: start #")]
        assert len(starts) == 2  # the restart case stopped the server in the container and started it again
        assert all("-e HF_TOKEN " in s and "-e ZE_AFFINITY_MASK " in s and "ZE_AFFINITY_MASK=" not in s
                   and "-u ONEAPI_ROOT" in s for s in starts)
        assert secret not in log
        assert secret not in (r.out / "install.log").read_text()
        assert "fault_server.py" not in ps_in(name)  # the server was stopped inside the kept container
    finally:
        left = tool_containers("podman")
        if left:
            remove("podman", *left)
    print(f"fresh-container smoke: {r.seconds:.1f}s")


def test_no_container_is_left_after_a_pass_or_a_failing_server(smoke, fresh, no_leftovers):
    lock = str(fresh["lock"].path)
    ok = smoke("--lock", lock, *FAST, "--cases", "models,math", "--serve-cmd", serve_cmd())
    assert ok.code == 0, ok.stdout
    assert tool_containers("podman") == []

    crash = smoke("--lock", lock, *FAST, "--cases", "models,first,math", "--serve-cmd", serve_cmd("crash-first"))
    assert crash.code == 1
    assert crash.verdicts() == {"models": "pass", "first": "error", "math": "error"}
    assert crash.run["crashed"]
    assert crash.run["server_exit_code"] == 139
    assert crash.finding_ids() == ["server-crash"]
    assert tool_containers("podman") == []

    never = smoke("--lock", lock, *FAST[:1], "--ready-timeout", "15", "--cases", "models",
                  "--serve-cmd", serve_cmd("never-ready"))
    assert never.code == 1
    assert never.finding_ids() == ["never-ready"]
    log = (never.out / "smoke" / "server.log").read_text()
    assert "INFO: Shutting down" in log  # SIGINT reached the server inside the container
    assert tool_containers("podman") == []
    print(f"fresh-container smoke: pass {ok.seconds:.1f}s, crash {crash.seconds:.1f}s, never ready "
          f"{never.seconds:.1f}s")


def test_sigint_removes_the_serving_container(fresh, tmp_path):
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "toolchain", "smoke", "--lock", str(fresh["lock"].path), *FAST,
            "--port", str(free_port()), "--out", str(out), "--cases", "models,math",
            "--serve-cmd", serve_cmd("slow-first", "--slow-seconds", "600")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = out / "smoke" / "server.log"
    try:
        wait_for("the slow first request", lambda: proc.poll() is not None or (
            log.is_file() and log.read_text().count("GET /v1/models") >= 2 and tool_containers("podman", proc.pid)))
        assert proc.poll() is None, proc.communicate()
        time.sleep(1.0)  # the math request is waiting on the server
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
        seconds = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        left = tool_containers("podman", proc.pid)
        if left:
            remove("podman", *left)
    assert proc.returncode == 130, err
    assert left == []
    assert seconds < 110  # stopped, not waited out (the request timeout is 120 s, the answer 600 s)
    assert "INFO: Shutting down" in log.read_text()  # the server inside was stopped first


def test_the_device_check_looks_inside_the_container(smoke, fresh, no_leftovers):
    r = smoke("--lock", str(fresh["lock"].path), "--device", "b70", "--cases", "models", "--serve-cmd", serve_cmd())
    assert r.code == 2
    out = json.loads(r.stdout)
    assert out["error"].startswith("podman container toolchain-smoke-")  # the discovery ran in the container
    assert "no Intel GPU was found" in out["error"]
    assert "--device=/dev/dri" in out["hint"]
    assert r.report["exit_code"] == 2
    assert "install" not in r.report
    assert tool_containers("podman") == []


def test_no_install_checks_the_images_own_interpreter(smoke, fresh, no_leftovers):
    r = smoke("--lock", str(fresh["lock"].path), "--no-install", *FAST, "--cases", "models",
              "--serve-cmd", serve_cmd())
    assert r.code == 1
    error = json.loads(r.stdout)["error"]
    assert "python3 in the podman container toolchain-smoke-" in error
    assert "nothing was served" in error
    assert f"demo-engine (engine): installed nothing, the lock has {locked_version(fresh['lock'], 'engine')}" in error
    assert r.report["install"]["python"] == "python3"
    assert not r.report["install"]["steps"]
    assert tool_containers("podman") == []


# ---- exec mode -----------------------------------------------------------------------------------------

def test_exec_mode_installs_and_serves_in_the_running_container(smoke, running, no_leftovers):
    """The container is recreated (same name) with an environment that sources the oneAPI stand-in in
    every bash (BASH_ENV) and names oneAPI: the server must see none of it."""
    name, lock = running["name"], running["lock"]
    remove("podman", name)
    start(name, running["image"], running["probe"], "--mount",
          f"type=bind,source={STANDIN},destination=/opt/intel/oneapi,readonly",
          "-e", "BASH_ENV=/opt/intel/oneapi/setvars.sh", "-e", "ONEAPI_ROOT=/opt/intel/oneapi")
    dump = running["probe"] / "exec-env.json"
    check = ("python3 -c 'import sys; assert sys.prefix == \"/toolchain/smoke/venv\"' && "
             "python3 -c 'import demo_kernels, importlib.metadata as m; print(\"KERNELS\", m.version(\"demo-kernels\"))'")
    r = smoke("--lock", str(lock.path), *FAST, "--cases", "models,math,restart",
              "--serve-cmd", serve_cmd("healthy", "--env-out", f"{PROBE}/{dump.name}", shell=check))
    assert r.code == 0, r.stdout
    assert_locked_install(r, lock)  # the staged files reached the container by copy
    target = r.report["target"]
    assert target["mode"] == "container"
    assert target["name"] == f"podman container {name}"
    assert target["image_digest"] == lock.target.image_digest
    log = (r.out / "smoke" / "server.log").read_text()
    assert log.count(f"KERNELS {locked_version(lock, 'kernels')}") == 2  # in the venv on PATH, both starts
    assert ":: oneAPI environment initialized" not in log  # bash did not source the stand-in
    env = json.loads(dump.read_text())["env"]
    assert not {"BASH_ENV", "ONEAPI_ROOT", "SETVARS_COMPLETED", "TOOLCHAIN_ONEAPI_STANDIN", "CMPLR_ROOT"} & set(env)
    assert "/opt/intel" not in env["PATH"]
    # left running, the server killed, what smoke brought in removed
    state = engine_run("podman", "container", "inspect", "--format", "{{.State.Running}}", name).stdout.strip()
    assert state == "true"
    assert "fault_server.py" not in ps_in(name)
    assert engine_run("podman", "exec", name, "test", "-e", "/toolchain", check=False).returncode == 1
    print(f"exec-mode smoke: {r.seconds:.1f}s")


def test_an_environment_in_the_container_that_differs_from_the_lock_is_flagged(smoke, running, tmp_path,
                                                                               no_leftovers):
    """--no-install with a venv in the running container holding the lock's files but another build of the
    stand-in torch: the environment report (read in the container) names it, and nothing is served."""
    name, lock = running["name"], running["lock"]
    other = build_standin_torch("2.14.0+xpu", tmp_path / "other")  # the locked version, another file
    files = [Path(d.local_path()) for d in lock.closure.dists] + [lock.wheel_path(c) for c in lock.components]
    engine_run("podman", "exec", name, "mkdir", "-p", "/tmp/envcheck")
    for f in [*files, other]:
        engine_run("podman", "cp", str(f), f"{name}:/tmp/envcheck/{f.name}")
    where = [f"/tmp/envcheck/{f.name}" for f in files]
    engine_run("podman", "exec", name, "sh", "-c", 'python3 -m venv /tmp/envcheck/v && /tmp/envcheck/v/bin/pip install '
               '-q --no-index --no-deps "$@" && /tmp/envcheck/v/bin/pip install -q --no-index --no-deps '
               f'--force-reinstall /tmp/envcheck/{other.name}', "sh", *where)
    try:
        r = smoke("--lock", str(lock.path), "--no-install", "--python", "/tmp/envcheck/v/bin/python", *FAST,
                  "--cases", "models", "--serve-cmd", serve_cmd())
        assert r.code == 1, r.stdout
        error = json.loads(r.stdout)["error"]
        assert "standin-torch: differs" in error
        assert sha256_file(other) in error
        assert "nothing was served" in error
        rows = {x["name"]: x for x in r.report["install"]["environment"]["locked"]}
        assert rows["standin-torch"]["state"] == "differs"
        assert rows["standin-torch"]["installed-sha256"] == sha256_file(other)
        assert all(x["state"] == "ok" for n, x in rows.items() if n != "standin-torch"), rows
        assert "| standin-torch | dependency |" in (r.out / "summary.md").read_text()
        assert not (r.out / "smoke").exists()
    finally:
        engine_run("podman", "exec", name, "rm", "-rf", "/tmp/envcheck", check=False)


def test_exec_mode_needs_a_reachable_container(smoke, running, no_leftovers):
    name = running["name"]
    remove("podman", name)
    start(name, running["image"], running["probe"], network="none")
    r = smoke("--lock", str(running["lock"].path), *FAST, "--cases", "models", "--serve-cmd", serve_cmd())
    assert r.code == 2
    out = json.loads(r.stdout)
    assert f"container {name!r} does not use the host's network" in out["error"]
    assert "--network=host" in out["hint"]
    state = engine_run("podman", "container", "inspect", "--format", "{{.State.Running}}", name).stdout.strip()
    assert state == "true"
