"""Builds inside a real container (issue 3): podman always where it works, docker where an engine answers.

The demo recipe is built in a fresh container per build (`image`) and by exec into a running container
(`container`). Containers the tool starts carry the label `toolchain.pid=<pid of the builder>`; every test
checks that none is left, also after a failing build and after SIGINT.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.container_fixtures import docker_image, podman_image  # noqa: F401  (pytest fixtures)
from tests.support.debian_image import configure_containers_conf, containers_env
from toolchain.build.plan import make_plan
from toolchain.build.stack import BuildOptions
from toolchain.console import UI
from toolchain.core import toml as tomlio
from toolchain.core.proc.runner import CommandFailed, CommandTimeout
from toolchain.core.proc.runner import run as proc_run
from toolchain.errors import BuildError
from toolchain.lock import verify_wheels
from toolchain.pipeline.build import build_stack
from toolchain.recipe.load import TargetSpec, load_recipe
from toolchain.target import HostRuntime, make_runtime
from toolchain.target.container import (
    ENGINES,
    ContainerNotRunning,
    EngineNotFound,
    EngineNotRunning,
    ExecContainerRuntime,
    FreshContainerRuntime,
    ImageNotFound,
    InterpreterMissing,
    image_digest,
)

pytestmark = pytest.mark.container

REPO = Path(__file__).resolve().parent.parent
STANDIN = REPO / "toolchain" / "demo_src" / "oneapi-standin" / "setvars.sh"
ENGINE_COMMIT = "d43566c0af71ff3c44e40da25d645a315ba3e3f8"  # demo engine v0.2.0, as pinned in recipes/demo.toml
TEST_LABEL = "org.toolchain.test=container-build"
TIMEOUT = 600


# ---- helpers ------------------------------------------------------------------------------------------

def engine_run(engine: str, *args: str, timeout: float = TIMEOUT, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([engine, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=containers_env())
    if check and proc.returncode != 0:
        raise AssertionError(f"{engine} {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def remove(engine: str, *names: str) -> None:
    engine_run(engine, *ENGINES[engine].remove_args, *names, check=False)


def tool_containers(engine: str, pid: int | None = None) -> list[str]:
    """Containers started by a builder with process id `pid` (default: this test process)."""
    out = engine_run(engine, "ps", "-a", "--filter", f"label=toolchain.pid={pid or os.getpid()}",
                     "--format", "{{.Names}}").stdout
    return out.split()


def in_image(engine: str, image: str, code: str) -> str:
    return engine_run(engine, "run", "--rm", "--network=none", "--entrypoint", "python3", image, "-c", code).stdout.strip()


def write_recipe(tmp_path: Path, name: str, data: dict, *, extends_demo: bool = True) -> Path:
    rdir = tmp_path / "recipes"
    rdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "recipes" / "demo.toml", rdir / "demo.toml")
    if extends_demo:
        data = {"extends": "demo", **data}
    # relative to the recipe file, like the shipped demo: the runtime brings the folder into the container
    data.setdefault("toolchain", {"setvars": os.path.relpath(STANDIN, rdir)})
    path = rdir / f"{name}.toml"
    path.write_text(tomlio.dumps(data))
    return path


def one_component(command: list[str]) -> dict:
    """A recipe with one demo component built by `command` (and no toolchain): quick to fail or hang."""
    return {"demo": True, "toolchain": {"setvars": ""},
            "components": {"probe": {"url": "https://demo.invalid/toolchain-demo/engine.git",
                                     "commit": ENGINE_COMMIT, "dist": "demo-engine", "command": command}}}


def build(recipe_path: Path, tmp_path: Path, tag: str):
    recipe = load_recipe(str(recipe_path), patches_dir=REPO / "patches")
    opts = BuildOptions(out_dir=tmp_path / f"out-{tag}", cache_dir=tmp_path / f"cache-{tag}")
    return build_stack(recipe, opts, UI(quiet=True))


def cli(recipe_path: Path, tmp_path: Path, tag: str, **kw) -> subprocess.Popen:
    argv = [sys.executable, "-m", "toolchain", "build", "--recipe", str(recipe_path),
            "--patches-dir", str(REPO / "patches"), "--cache-dir", str(tmp_path / f"cache-{tag}"),
            "--out", str(tmp_path / f"out-{tag}"), "--json"]
    return subprocess.Popen(argv, cwd=REPO, env=containers_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def wait_for(what: str, check, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.25)


def in_container_processes(engine: str, container: str) -> str:
    script = 'for f in /proc/[0-9]*/cmdline; do tr "\\0" " " <"$f" 2>/dev/null; echo; done'
    return engine_run(engine, "exec", container, "sh", "-c", script).stdout


# ---- fixtures -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["podman", "docker"])
def engine(request) -> str:
    configure_containers_conf()
    return request.param


@pytest.fixture(scope="module")
def image(engine, request) -> str:
    return request.getfixturevalue(f"{engine}_image")


@pytest.fixture(scope="module")
def fresh(engine, image, tmp_path_factory):
    """The demo built in a fresh container per component; what was left behind right after."""
    tmp = tmp_path_factory.mktemp(f"fresh-{engine}")
    path = write_recipe(tmp, "in-container", {"target": {"runtime": engine, "image": image, "python": "python3"}})
    started = time.monotonic()
    lock = build(path, tmp, "fresh")
    return {"lock": lock, "tmp": tmp, "seconds": time.monotonic() - started, "left": tool_containers(engine)}


@pytest.fixture
def running(engine, image):
    """A container started by the test (as a user would start vllm's), for exec mode."""
    name = f"toolchain-test-exec-{uuid.uuid4().hex[:8]}"
    engine_run(engine, "run", "--detach", "--name", name, "--label", TEST_LABEL, "--network=none",
               "--entrypoint", "sleep", image, "infinity")
    yield name
    remove(engine, name)


@pytest.fixture
def no_leftovers(engine):
    yield
    left = tool_containers(engine)
    if left:
        remove(engine, *left)
    assert not left, f"containers left behind: {left}"


# ---- builds -------------------------------------------------------------------------------------------

def test_fresh_build_uses_the_containers_interpreter_and_toolchain(engine, image, fresh):
    lock = fresh["lock"]
    version = in_image(engine, image, "import platform; print(platform.python_version())")
    pip = in_image(engine, image, "from importlib.metadata import version; print(version('pip'))")
    assert lock.target.runtime == engine
    assert lock.target.python_version == version, f"host python is {platform.python_version()}"
    assert lock.target.pip_version == pip
    tag = "cp" + "".join(version.split(".")[:2])
    assert lock.target.python_tag == tag
    kernels = lock.component("kernels").wheel.file
    assert f"-{tag}-{tag}-" in kernels, kernels
    # setvars was sourced inside: the stand-in's folder is mounted at a fixed path there
    assert lock.toolchain.setvars == "/toolchain/setvars/setvars.sh"
    assert lock.toolchain.cmplr_root == "/toolchain/setvars"
    assert lock.toolchain.oneapi_version == "2025.2.0"
    assert lock.target.image == image
    image_id, _, digests = engine_run(engine, "image", "inspect", "--format", "{{.Id}}|{{json .RepoDigests}}",
                                      image).stdout.strip().partition("|")
    digests = [d.split("@", 1)[1] for d in json.loads(digests) or []]
    # docker gives no repo digest to an image that was only loaded (never pushed or pulled): the lock has its id
    assert lock.target.image_digest in (digests or ["id:" + image_id])
    assert lock.target.container == ""
    verify_wheels(lock)
    assert fresh["left"] == [], f"containers left after the build: {fresh['left']}"
    print(f"fresh {engine} build: {fresh['seconds']:.1f}s")


def test_host_and_container_builds_have_different_cache_keys(fresh):
    host = load_recipe("demo", recipes_dir=REPO / "recipes")
    with make_runtime(host.target) as runtime:
        plan = make_plan(host, runtime)
    host_keys = {c.name: c.cache_key for c in plan.components}
    container_keys = {c.name: c.cache_key for c in fresh["lock"].components}
    assert set(host_keys) == set(container_keys)
    assert all(host_keys[n] != container_keys[n] for n in host_keys), (host_keys, container_keys)
    assert plan.target.runtime == "host"
    assert plan.toolchain.cmplr_root == str(STANDIN.parent)


def test_exec_mode_builds_in_the_running_container_and_leaves_it_running(engine, image, fresh, running, tmp_path,
                                                                        no_leftovers):
    path = write_recipe(tmp_path, "in-running", {"target": {"runtime": engine, "container": running}})
    lock = build(path, tmp_path, "exec")
    cid = engine_run(engine, "container", "inspect", "--format", "{{.Id}}", running).stdout.strip()
    assert lock.target.container == cid
    assert lock.target.image == image
    assert lock.target.image_digest == fresh["lock"].target.image_digest
    assert lock.toolchain.cmplr_root == "/toolchain/setvars"
    verify_wheels(lock)
    # the same fixed paths inside, so the same wheels, byte for byte, as the fresh-container build
    assert {c.name: c.wheel.sha256 for c in lock.components} == \
           {c.name: c.wheel.sha256 for c in fresh["lock"].components}
    state = engine_run(engine, "container", "inspect", "--format", "{{.State.Running}}", running).stdout.strip()
    assert state == "true"
    assert engine_run(engine, "exec", running, "test", "-e", "/toolchain", check=False).returncode == 1


def test_failing_build_removes_its_containers(engine, image, tmp_path, no_leftovers):
    path = write_recipe(tmp_path, "fails", {**one_component(["false"]),
                                            "target": {"runtime": engine, "image": image}}, extends_demo=False)
    with pytest.raises(BuildError, match="building probe@"):
        build(path, tmp_path, "fail")


def interrupt(proc: subprocess.Popen, ready) -> tuple[str, float]:
    """Wait until `ready()` (the build runs), send SIGINT, wait for the exit: (stderr, seconds it took)."""
    try:
        wait_for("the build command to run", lambda: ready() or proc.poll() is not None)
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.5)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=600)
        return err, time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_sigint_during_a_build_removes_its_containers(engine, image, tmp_path):
    path = write_recipe(tmp_path, "hangs", {**one_component(["sleep", "900"]),
                                            "target": {"runtime": engine, "image": image}}, extends_demo=False)
    proc = cli(path, tmp_path, "sigint")
    log = tmp_path / "out-sigint" / "logs" / "probe.log"
    err, seconds = interrupt(proc, lambda: log.is_file() and "sleep 900" in log.read_text()
                             and any(n.startswith("toolchain-build-") for n in tool_containers(engine, proc.pid)))
    print(f"{engine}: exit {seconds:.1f}s after SIGINT")
    assert proc.returncode == 130, err
    # stopped, not the step's 900 s: 2 s with podman, 53 s with docker (vfs) measured with both cores busy
    assert seconds < 450
    left = tool_containers(engine, proc.pid)
    if left:
        remove(engine, *left)
    assert left == []


def test_a_run_killed_with_sigkill_leaves_nothing_once_the_next_run_starts(engine, image, tmp_path):
    """SIGKILL cannot be caught: the killed run's build container and its build step (an engine client in a
    process group and cgroup of its own) outlive it. The next run that starts a container removes that
    container (its owner label names a process that has ended) and ends what runs in the dead run's cgroups."""
    from toolchain.core.proc import cgroups

    path = write_recipe(tmp_path, "hangs", {**one_component(["sleep", "300"]),
                                            "target": {"runtime": engine, "image": image}}, extends_demo=False)
    root = cgroups._find_cgroup_root()  # (before the kill: looking for it removes what a killed tool left)
    tool = cli(path, tmp_path, "killed")
    log = tmp_path / "out-killed" / "logs" / "probe.log"
    try:
        wait_for("the build step to run", lambda: tool.poll() is not None or (
            log.is_file() and "sleep 300" in log.read_text()
            and any(n.startswith("toolchain-build-") for n in tool_containers(engine, tool.pid))))
        assert tool.poll() is None, tool.communicate()
        killed = tool_containers(engine, tool.pid)
        os.kill(tool.pid, signal.SIGKILL)  # the tool alone, as `kill -9 PID` does
    finally:
        if tool.poll() is None:
            tool.kill()
        tool.communicate()
    left_running = [p for p in root.glob(f"toolchain-{tool.pid}-*") if (p / "cgroup.procs").read_text().strip()] \
        if root is not None else []
    assert tool_containers(engine, tool.pid) == killed  # what SIGKILL leaves
    if root is not None:
        assert left_running, "the build step's engine client outlived the killed run in its cgroup"

    again = write_recipe(tmp_path, "fails", {**one_component(["sh", "-c", "exit 3"]),
                                             "target": {"runtime": engine, "image": image}}, extends_demo=False)
    nxt = cli(again, tmp_path, "next")
    _, err = nxt.communicate(timeout=600)
    assert nxt.returncode == 1, err  # its own build failed, as asked; it started a container first
    assert tool_containers(engine, tool.pid) == [], "the killed run's container is still there"
    assert tool_containers(engine, nxt.pid) == []
    if root is not None:
        assert not list(root.glob(f"toolchain-{tool.pid}-*")), "the killed run's cgroups (and build step) remain"


def test_sigint_in_exec_mode_stops_the_command_and_cleans_up(engine, running, tmp_path):
    path = write_recipe(tmp_path, "hangs", {**one_component(["sleep", "297"]),
                                            "target": {"runtime": engine, "container": running}}, extends_demo=False)
    proc = cli(path, tmp_path, "sigint-exec")
    err, _ = interrupt(proc, lambda: "sleep 297" in in_container_processes(engine, running))
    assert proc.returncode == 130, err
    assert "sleep 297" not in in_container_processes(engine, running)
    assert engine_run(engine, "exec", running, "test", "-e", "/toolchain", check=False).returncode == 1


# ---- the runtime directly -----------------------------------------------------------------------------

def test_env_values_stay_off_the_engine_command_line(engine, image, tmp_path, monkeypatch, no_leftovers):
    import toolchain.target.container.engine as engine_calls

    seen = []
    real_run = proc_run  # what the engine calls (core.proc.runner's)

    def spy(argv, **kw):
        seen.append(list(argv))
        return real_run(argv, **kw)

    monkeypatch.setattr(engine_calls, "run", spy)
    (tmp_path / "src").mkdir()
    (tmp_path / "out").mkdir()
    secret = f"s3cret-{uuid.uuid4().hex}"
    with FreshContainerRuntime(TargetSpec(runtime=engine, image=image)) as rt, \
            rt.workspace(tmp_path / "src", tmp_path / "out", {}) as ws:
        r = ws.run(["sh", "-c", 'echo "$HF_TOKEN|$PATH|${LANG-unset}|$(pwd)"'],
                   env={"HF_TOKEN": secret, "PATH": "/opt/x/bin:/usr/bin:/bin", "LANG": None},
                   cwd=ws.src, log=None, capture=True)
    assert r.stdout.strip() == f"{secret}|/opt/x/bin:/usr/bin:/bin|unset|/toolchain/src"
    assert not any(secret in arg for argv in seen for arg in argv)
    exec_argv = next(a for a in seen if "exec" in a and "HF_TOKEN" in a)
    assert exec_argv[exec_argv.index("HF_TOKEN") - 1] == "-e"
    # PATH is read by the engine client itself: passed as NAME=VALUE, not through the engine's environment
    assert "PATH=/opt/x/bin:/usr/bin:/bin" in exec_argv


@pytest.mark.skipif(os.geteuid() != 0, reason="changing file owners needs root (a rootful engine run via sudo)")
def test_output_belongs_to_the_sudo_user(engine, image, tmp_path, monkeypatch, running, no_leftovers):
    monkeypatch.setenv("SUDO_UID", "4321")
    monkeypatch.setenv("SUDO_GID", "4322")
    for mode, rt in (("fresh", FreshContainerRuntime(TargetSpec(runtime=engine, image=image))),
                     ("exec", ExecContainerRuntime(TargetSpec(runtime=engine, container=running)))):
        src, out = tmp_path / mode / "src", tmp_path / mode / "out"
        src.mkdir(parents=True)
        out.mkdir()
        with rt:
            if rt.rootless:
                pytest.skip(f"{engine} is rootless: container root is the invoking user already")
            with rt.workspace(src, out, {}) as ws:
                ws.run(["sh", "-c", "mkdir -p build && echo x >build/obj && echo w >/toolchain/out/a-1-py3-none-any.whl"],
                       env={}, cwd=ws.src, log=None)
        wheel = out / "a-1-py3-none-any.whl"
        assert wheel.read_text() == "w\n"
        assert (wheel.stat().st_uid, wheel.stat().st_gid) == (4321, 4322), mode
        if mode == "fresh":  # the mounted tree too (exec mode builds in a copy)
            assert (src / "build" / "obj").stat().st_uid == 4321


def test_keep_containers_for_debugging(engine, image, tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLCHAIN_KEEP_CONTAINERS", "1")
    (tmp_path / "src").mkdir()
    (tmp_path / "out").mkdir()
    try:
        with make_runtime(TargetSpec(runtime=engine, image=image)) as rt, \
                rt.workspace(tmp_path / "src", tmp_path / "out", {}) as ws:
            ws.run(["true"], env={}, cwd=ws.src, log=None)
        kept = tool_containers(engine)
        assert any(n.startswith("toolchain-build-") for n in kept), kept
    finally:
        left = tool_containers(engine)
        if left:
            remove(engine, *left)


def test_setvars_paths_inside_the_container(engine, image, tmp_path, no_leftovers):
    with make_runtime(TargetSpec(runtime=engine, image=image)) as rt:
        assert rt.toolchain_path("/opt/intel/oneapi/setvars.sh", tmp_path) == "/opt/intel/oneapi/setvars.sh"
        rel = os.path.relpath(STANDIN, tmp_path)
        inside = rt.toolchain_path(rel, tmp_path)
        assert inside == "/toolchain/setvars/setvars.sh"
        r = rt.run(["sh", "-c", 'test -r "$0" && test -x "${0%/*}/bin/icpx" && ! touch "${0%/*}/x" 2>/dev/null',
                    inside], check=False, capture=True)
        assert r.returncode == 0, "the stand-in is mounted read-only with its bin/"
        assert rt.base_env().get("LANG") == "C.UTF-8"  # the image's environment, not the host's


@pytest.mark.parametrize("mode", ["host", "fresh", "exec"])
def test_every_runtime_keeps_the_runtime_protocol(mode, engine, image, tmp_path, request, no_leftovers):
    """The same calls, through `make_runtime`, on the host, in a fresh container and in a running one."""
    spec = {"host": lambda: TargetSpec(python=sys.executable),
            "fresh": lambda: TargetSpec(runtime=engine, image=image),
            "exec": lambda: TargetSpec(runtime=engine, container=request.getfixturevalue("running"))}[mode]()
    runtime = make_runtime(spec)
    assert type(runtime) is {"host": HostRuntime, "fresh": FreshContainerRuntime, "exec": ExecContainerRuntime}[mode]
    src, out, dep = tmp_path / "src", tmp_path / "out", tmp_path / "dep"
    for d, text in ((src, "from src\n"), (dep, "from dep\n")):
        d.mkdir()
        (d / "input").write_text(text)
    out.mkdir()
    with runtime as rt:
        assert rt.describe() == {"host": "host", "fresh": f"{engine} container (image {image})",
                                 "exec": f"{engine} container {spec.container}"}[mode]
        info, watch = rt.probe_inputs()
        assert info == rt.probe()
        assert info.runtime == spec.runtime
        assert info.python_tag.startswith("cp")
        assert (rt.identity() is None) == (mode != "host")
        assert (not watch) == (mode != "host")
        if mode != "host":
            cid = "" if mode == "fresh" else engine_run(engine, "container", "inspect", "--format", "{{.Id}}",
                                                        spec.container).stdout.strip()
            assert info.image == image
            assert info.image_digest
            assert info.container == cid
        setvars = rt.toolchain_path(os.path.relpath(STANDIN, tmp_path), tmp_path)
        assert rt.run(["sh", "-c", 'test -x "${0%/*}/bin/icpx" && echo found', setvars], capture=True).stdout == "found\n"
        assert "PATH" in rt.base_env()
        assert rt.run(["sh", "-c", "exit 3"], check=False, capture=True).returncode == 3
        with pytest.raises(CommandFailed):
            rt.run(["sh", "-c", "exit 4"], capture=True)
        missing = rt.run(["no-such-program-xyz"], check=False, capture=True)  # never raises with check=False
        assert missing.returncode == 127
        assert "no-such-program-xyz" in missing.stderr
        with pytest.raises(CommandTimeout):
            rt.run(["sleep", "31"], timeout=1)
        if mode == "exec":  # someone else's container: the command stopped there too, not only its engine client
            assert "sleep 31" not in in_container_processes(engine, spec.container)
        with rt.workspace(src, out, {"dep": dep}) as ws:
            ws.run(["sh", "-c", 'cat input "$0/input" >"$1/result-1-py3-none-any.whl"', ws.deps["dep"], ws.out],
                   env={}, cwd=ws.src, log=None)
    assert (out / "result-1-py3-none-any.whl").read_text() == "from src\nfrom dep\n"
    if mode == "exec":
        assert engine_run(engine, "exec", spec.container, "test", "-e", "/toolchain", check=False).returncode == 1


# ---- errors -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["podman", "docker"])
def test_engine_not_installed(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EngineNotFound, match=f"{kind} is not installed") as info:
        make_runtime(TargetSpec(runtime=kind, image="debian:bookworm")).__enter__()
    assert "install" in (info.value.hint or "")


@pytest.mark.parametrize("kind", ["podman", "docker"])
def test_engine_without_a_service(kind, tmp_path, monkeypatch):
    if shutil.which(kind) is None:
        pytest.skip(f"{kind} is not installed")
    sock = f"unix://{tmp_path}/nobody-listens.sock"
    if kind == "podman":
        monkeypatch.setenv("CONTAINER_HOST", sock)
        spec = TargetSpec(runtime=kind, image="debian:bookworm", engine_args=("--remote",))
    else:
        monkeypatch.setenv("DOCKER_HOST", sock)
        spec = TargetSpec(runtime=kind, image="debian:bookworm")
    with pytest.raises(EngineNotRunning, match="does not answer") as info:
        make_runtime(spec).__enter__()
    assert info.value.hint


def test_image_not_present_and_not_pullable(engine, image, no_leftovers):
    missing = f"localhost/toolchain-no-such-image:{uuid.uuid4().hex[:8]}"
    with pytest.raises(ImageNotFound, match="cannot be pulled") as info:
        make_runtime(TargetSpec(runtime=engine, image=missing)).__enter__()
    assert info.value.return_code == 2
    assert "images" in (info.value.hint or "")


def test_named_container_missing_or_stopped(engine, image, no_leftovers):
    name = f"toolchain-test-stopped-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ContainerNotRunning, match="there is no") as info:
        make_runtime(TargetSpec(runtime=engine, container=name)).__enter__()
    assert f"run -d --name {name}" in (info.value.hint or "")
    engine_run(engine, "create", "--name", name, "--label", TEST_LABEL, image, "true")
    try:
        with pytest.raises(ContainerNotRunning, match="exists but is not running") as info:
            make_runtime(TargetSpec(runtime=engine, container=name)).__enter__()
        assert f"{engine} start {name}" in (info.value.hint or "")
    finally:
        remove(engine, name)


def test_interpreter_missing_in_the_image(engine, image, no_leftovers):
    with make_runtime(TargetSpec(runtime=engine, image=image, python="python9")) as rt, \
            pytest.raises(InterpreterMissing, match="'python9' is not in the") as info:
        rt.probe()
    assert info.value.return_code == 2
    assert "[target] python" in (info.value.hint or "")


def test_image_digest_choice():
    digests = ["docker.io/library/debian@sha256:aaa", "quay.io/x/vllm@sha256:bbb"]
    assert image_digest("quay.io/x/vllm:1.0", "cafe", digests) == "sha256:bbb"
    assert image_digest("debian:bookworm", "cafe", digests) == "sha256:aaa"
    assert image_digest("other", "cafe", digests) == "sha256:aaa"
    assert image_digest("local:dev", "cafe", []) == "id:sha256:cafe"
    assert image_digest("local:dev", "sha256:cafe", []) == "id:sha256:cafe"


def test_each_runtime_does_what_callers_ask_instead_of_saying_where_it_is(engine, image, tmp_path, running,
                                                                          no_leftovers):
    """The acts that replaced the where-questions (issue 43 item 2), in real containers beside the host: the
    resources query answered where builds run (the host in-process, a container from its own files), the paths
    a workspace shows, how many builds at once, which program is carried in, where a venv goes and who removes
    it."""
    from toolchain.build.intarget import gather
    from toolchain.build.metrics import RUNNER_FILE
    from toolchain.errors import UsageError

    host = HostRuntime(TargetSpec(python=sys.executable))
    fresh_rt = FreshContainerRuntime(TargetSpec(runtime=engine, image=image))
    exec_rt = ExecContainerRuntime(TargetSpec(runtime=engine, container=running))
    here = json.loads(host.query(sys.executable, RUNNER_FILE, "resources").stdout)
    assert here["files"].keys() == gather()["files"].keys()
    with fresh_rt:
        there = fresh_rt.query("python3", RUNNER_FILE, "resources")
        assert there.returncode == 0, there.stderr
        assert "proc/meminfo" in json.loads(there.stdout)["files"]
        assert fresh_rt.query("python3", RUNNER_FILE, "nope").returncode != 0
    assert host.query(sys.executable, RUNNER_FILE, "nope").returncode == 1
    assert (host.builds_at_once(4), fresh_rt.builds_at_once(4), exec_rt.builds_at_once(4)) == (4, 4, 1)
    deps = {"cutlass": tmp_path / "d"}
    assert host.workspace_paths(tmp_path / "s", tmp_path / "o", deps) == (
        str(tmp_path / "s"), str(tmp_path / "o"), {"cutlass": str(tmp_path / "d")})
    assert fresh_rt.workspace_paths(tmp_path / "s", tmp_path / "o", deps) == (
        "/toolchain/src", "/toolchain/out", {"cutlass": "/toolchain/deps/cutlass"})
    ccache_bin = Path(shutil.which("ls") or "/bin/ls")
    assert host.carried("ccache", ccache_bin, static=False) is not None
    assert fresh_rt.carried("ccache", ccache_bin, static=False) is None
    assert fresh_rt.carried("ccache", ccache_bin, static=True) is not None
    assert (host.inherited_env() is os.environ, dict(fresh_rt.inherited_env())) == (True, {})
    assert host.venv_at(tmp_path / "v") == str(tmp_path / "v")
    with pytest.raises(UsageError, match="made inside it"):
        exec_rt.venv_at(tmp_path / "v")
    (tmp_path / "v").mkdir()
    assert (host.leave(str(tmp_path / "v"), keep=True), (tmp_path / "v").is_dir()) == ("kept", True)
    assert (host.leave(str(tmp_path / "v"), keep=False), (tmp_path / "v").exists()) == ("removed", False)
    assert host.leave(str(tmp_path / "v"), keep=False) == ""
    assert fresh_rt.leave("/toolchain/smoke/venv", keep=False) == ""
    assert (host.provides("vllm"), fresh_rt.provides("vllm")) == (False, True)
