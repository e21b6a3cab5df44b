"""The small journeys of `toolchain image` and of what a bundle says about images (issue 49): each at its cause."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.spine_helpers import Cli, isolated_env
from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixture)
from tests.support.debian_image import containers_env
from tests.support.registry_fixtures import registry  # noqa: F401  (pytest fixture)
from tests.test_image import test_base  # noqa: F401  (the pinned Debian base: a fixture)
from toolchain.lock import read_lock
from toolchain.release.bundle import install_text
from toolchain.target.baseenv import BaseEnv


def test_an_image_delivered_nowhere_is_refused_before_anything_is_made(tmp_path):
    cli = Cli(tmp_path, isolated_env(tmp_path))
    r = cli("image", "--lock", tmp_path / "no-such.lock", "--tag", "localhost/x:1", "--json")
    assert r.returncode == 2, str(r)
    err = r.json()["error"]
    assert "--load" in err and "--push" in err and "--oci-dir" in err, err
    assert not (tmp_path / ".cache").exists() or not list((tmp_path / ".cache").rglob("images"))


def test_image_names_plain_http_as_the_rest_of_the_tool_does():
    from toolchain.cli import build_parser

    parser = build_parser()
    for argv in (["image", "--lock", "l", "--tag", "t", "--remote-insecure"],
                 ["image", "--lock", "l", "--tag", "t", "--insecure"],  # (its older name still works)
                 ["lock", "--image", "t", "--remote-insecure"], ["verify-repro", "--lock", "l", "--image", "t",
                                                                 "--remote-insecure"]):
        assert parser.parse_args(argv).insecure is True, argv


def test_a_container_bundles_install_text_names_its_image_and_toolchain_image(demo_build):
    lock = read_lock(demo_build.out / "stack.lock.toml")
    assert "toolchain image" not in install_text(lock)  # a host lock: no image to name
    digest = "sha256:" + "a" * 64
    in_podman = dataclasses.replace(lock, target=dataclasses.replace(
        lock.target, runtime="podman", image="localhost/builder:1", image_digest=digest))
    text = install_text(in_podman)
    assert f"localhost/builder@{digest}" in text, text
    assert f"toolchain image --lock stack.lock.toml --base localhost/builder@{digest}" in text, text
    over = dataclasses.replace(lock, base=BaseEnv(f"example.invalid/vllm@{digest}", digest, "3.11.2", "", "0"))
    text = install_text(over)
    assert "toolchain image --lock stack.lock.toml --tag" in text and f"example.invalid/vllm@{digest}" in text, text


@pytest.mark.slow
@pytest.mark.container
def test_an_interpreter_the_base_lacks_is_bad_input_said_in_one_line(demo_build, test_base, tmp_path):  # noqa: F811
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    r = cli("image", "--lock", demo_build.out / "stack.lock.toml", "--tag", "localhost/i49-py9:1", "--base", test_base,
            "--python", "/usr/bin/python9", "--oci-dir", tmp_path / "oci", "--cache-dir", tmp_path / "cache", "--json",
            timeout=600)
    assert r.returncode == 2, str(r)
    err = r.json()["error"]
    assert "/usr/bin/python9" in err and "\n" not in err, err
    assert not (tmp_path / "oci").exists()


@pytest.mark.slow
@pytest.mark.container
def test_the_lock_of_an_image_only_docker_holds_names_it_by_its_id(demo_build, test_base, tmp_path):  # noqa: F811
    from tests.test_image import _engine, _image

    tag = "localhost/i49-docker-only:1"
    _engine("podman", "rmi", tag, check=False)
    made = _image(tmp_path, "a", demo_build.out / "stack.lock.toml", "--tag", tag, "--base", test_base,
                  "--load", "docker")
    try:
        cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
        r = cli("lock", "--image", tag, "--out", tmp_path / "back", timeout=600)
        assert r.returncode == 0, str(r)
        assert "(image )" not in r.stdout and f"(image id {made['config']}" in r.stdout, r.stdout
    finally:
        _engine("docker", "rmi", tag, check=False)


@pytest.mark.slow
@pytest.mark.container
def test_verify_repro_of_an_image_of_another_lock_says_so_from_its_label_and_builds_nothing(
        demo_build, test_base, tmp_path):  # noqa: F811
    import shutil

    from tests.test_image import _engine, _image

    tag = "localhost/i49-repro:1"
    _image(tmp_path, "a", demo_build.out / "stack.lock.toml", "--tag", tag, "--base", test_base, "--load", "podman")
    other = tmp_path / "other"
    shutil.copytree(demo_build.out, other)
    (other / "stack.lock.toml").write_text((other / "stack.lock.toml").read_text() + "# another release\n")
    try:
        cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
        r = cli("verify-repro", "--lock", other / "stack.lock.toml", "--image", tag, "--work-dir", tmp_path / "work",
                "--cache-dir", tmp_path / "cache", "--json", timeout=600)
        assert r.returncode == 1, str(r)
        assert "carries another lock" in r.json()["first-difference"], r.json()
        assert not (tmp_path / "work").exists()  # nothing made, nothing left
        assert not (tmp_path / "cache" / "images" / "layers").exists()
    finally:
        _engine("podman", "rmi", tag, check=False)


@pytest.mark.slow
@pytest.mark.container
def test_a_lock_alone_takes_its_wheels_from_the_cache_by_sha256(demo_build, test_base, tmp_path):  # noqa: F811
    import shutil

    from tests.test_image import _image

    cache = tmp_path / "cache"
    shutil.copytree(demo_build.cache, cache, symlinks=True)
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copyfile(demo_build.out / "stack.lock.toml", alone / "stack.lock.toml")  # no wheels/ beside it
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    r = cli("image", "--lock", alone / "stack.lock.toml", "--tag", "localhost/i49-alone:1", "--base", test_base,
            "--oci-dir", tmp_path / "oci", "--cache-dir", cache, "--json", timeout=900)
    assert r.returncode == 0, str(r)
    beside = _image(tmp_path, "beside", demo_build.out / "stack.lock.toml", "--tag", "localhost/i49-alone:1",
                    "--base", test_base, "--oci-dir", tmp_path / "oci-beside")
    assert r.json()["digest"] == beside["digest"]
    # a cache that lacks them: the lock's wheels are named, and where they were looked for
    r = cli("image", "--lock", alone / "stack.lock.toml", "--tag", "localhost/i49-alone:1", "--base", test_base,
            "--oci-dir", tmp_path / "oci-2", "--cache-dir", tmp_path / "empty-cache", "--json", timeout=900)
    assert r.returncode == 1, str(r)
    assert "neither beside it" in r.json()["error"] and "demo_engine-" in r.json()["error"], r.json()


@pytest.mark.slow
@pytest.mark.container
def test_a_layer_over_an_externally_managed_interpreter_says_so(demo_build, test_base, tmp_path):  # noqa: F811
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    r = cli("image", "--lock", demo_build.out / "stack.lock.toml", "--tag", "localhost/i49-pep668:1", "--base",
            test_base, "--oci-dir", tmp_path / "oci", "--cache-dir", tmp_path / "cache", timeout=900)
    assert r.returncode == 0, str(r)
    # Debian's python3 carries /usr/lib/python3.11/EXTERNALLY-MANAGED
    assert "externally managed (PEP 668: /usr/lib/python3.11/EXTERNALLY-MANAGED)" in r.stderr, r.stderr


@pytest.mark.slow
@pytest.mark.container
def test_a_base_named_otherwise_than_the_engine_holds_its_digest_is_refused(demo_build, test_base, tmp_path):  # noqa: F811
    digest = test_base.split("@", 1)[1]
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    r = cli("image", "--lock", demo_build.out / "stack.lock.toml", "--tag", "localhost/i49-nope:1", "--base",
            f"localhost/nope@{digest}", "--oci-dir", tmp_path / "oci", "--cache-dir", tmp_path / "cache", "--json",
            timeout=900)
    assert r.returncode == 2, str(r)
    err = r.json()["error"]
    assert f"holds {digest} as {test_base.split('@', 1)[0]}, not as localhost/nope" in err, err
    assert not (tmp_path / "oci").exists()


@pytest.mark.slow
@pytest.mark.container
def test_a_registry_base_is_pulled_over_plain_http_with_remote_insecure_and_a_failure_names_the_base(
        demo_build, test_base, registry, tmp_path):  # noqa: F811
    from tests.test_image import _engine

    lock = demo_build.out / "stack.lock.toml"
    reg = registry.address
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    pushed = cli("image", "--lock", lock, "--base", test_base, "--cache-dir", tmp_path / "cache", "--push",
                 "--remote-insecure", "--tag", f"{reg}/i49/base:1", "--json", timeout=1200)
    assert pushed.returncode == 0, str(pushed)
    base = f"{reg}/i49/base@{pushed.json()['digest']}"
    _engine("podman", "rmi", base, f"{reg}/i49/base:1", check=False)  # (podman does not hold it)
    # plain HTTP not said: the pull fails, and the error is about the base image, naming what to pass
    refused = cli("image", "--lock", lock, "--base", base, "--cache-dir", tmp_path / "cache-2", "--oci-dir",
                  tmp_path / "oci-2", "--tag", "localhost/i49-over:1", "--json", timeout=1200)
    assert refused.returncode == 1, str(refused)
    assert refused.json()["error"].startswith(f"the base image {base} is not in podman and cannot be pulled")
    assert "--remote-insecure" in refused.json()["hint"] and "[target]" not in refused.stdout + refused.stderr
    made = cli("image", "--lock", lock, "--base", base, "--cache-dir", tmp_path / "cache-3", "--oci-dir",
               tmp_path / "oci-3", "--tag", "localhost/i49-over:1", "--remote-insecure", "--json", timeout=1200)
    try:
        assert made.returncode == 0, str(made)
    finally:
        _engine("podman", "rmi", base, check=False)


@pytest.mark.slow
@pytest.mark.container
def test_smoke_of_an_image_without_vllm_is_refused_before_anything_starts(demo_build, test_base, tmp_path):  # noqa: F811
    from tests.test_image import _engine, _image

    tag = "localhost/i49-novllm:1"
    _image(tmp_path, "a", demo_build.out / "stack.lock.toml", "--tag", tag, "--base", test_base, "--load", "podman")
    try:
        cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
        r = cli("smoke", "--image", tag, "--skip-device-check", "--json", timeout=600)
        assert r.returncode == 2, str(r)
        assert "cannot be smoked" in r.json()["error"] and "no vLLM" in r.json()["error"], r.json()
        assert not (tmp_path / "smoke-reports").exists()  # nothing started, no report
        listed = _engine("podman", "ps", "-a", "--filter", f"ancestor={tag}", "--format", "{{.ID}}").stdout.split()
        assert not listed, listed
    finally:
        _engine("podman", "rmi", tag, check=False)


def test_smoke_help_says_where_an_images_reports_go():
    import argparse

    from toolchain.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert "with --image, ./smoke-reports/<time>" in " ".join(sub.choices["smoke"].format_help().split())


@pytest.mark.slow
@pytest.mark.container
def test_ctrl_c_during_a_docker_load_leaves_docker_as_it_was(demo_build, test_base, tmp_path):  # noqa: F811
    """docker's load reads the image from a pipe. Ctrl-C once its client has sent the whole archive (the tool
    wrote it and closed the pipe; the client read and sent it all) while the daemon loads it: the daemon
    finishes that load whatever happens to its client, so the tool waits for the client to say so and removes
    the image: exit 130, the client ended before the tool did, docker holds no image by that id or tag (none
    can appear later). Held there deterministically: the client is stopped (SIGSTOP) as soon as it is seen and
    let run in slices, each ended by a stop, until it has closed its input. Then an image docker already holds
    (loaded under the tag first): Ctrl-C while the client is still being fed cuts the archive short, and docker
    keeps the image as it was, its tag too (it was removed by id with the load it stopped)."""
    import os

    from tests.test_image import _engine, _image

    tag = "localhost/i49-ctrlc:1"
    lock = demo_build.out / "stack.lock.toml"
    ident = _image(tmp_path, "id", lock, "--tag", tag, "--base", test_base)["config"]  # (an OCI layout: its id)
    _engine("docker", "rmi", ident, check=False)  # (left by a run stopped part way: its images go with it)
    assert _engine("docker", "image", "inspect", ident, check=False).returncode != 0, "docker holds it already"
    proc = _image_loading("docker", tag, lock, test_base, tmp_path)
    client = 0
    try:
        client = _child(proc, "docker load", 600, then=lambda pid: os.kill(pid, signal.SIGSTOP))
        assert client, f"no `docker load` started: {proc.communicate(timeout=600)}"
        while not _fed_whole(client):
            os.kill(client, signal.SIGCONT)  # a slice
            time.sleep(0.01)
            os.kill(client, signal.SIGSTOP)
            assert _stopped(client), "the client ended before it was seen to read its whole archive"
        _ctrl_c(proc, client)
        assert _engine("docker", "image", "inspect", ident, check=False).returncode != 0, "the load was not undone"
        assert _engine("docker", "image", "inspect", tag, check=False).returncode != 0
        work = tmp_path / "cache" / "images" / "work"
        assert not [p for p in work.iterdir() if p.is_dir()], list(work.iterdir())  # (the client's temp folder)
        # an image docker holds already, under the tag: a stopped load of it leaves it there
        held = _image(tmp_path, "held", lock, "--tag", tag, "--base", test_base, "--load", "docker")
        assert held["config"] == ident
        proc = _image_loading("docker", tag, lock, test_base, tmp_path, remove=False)
        client = _child(proc, "docker load", 600, then=lambda pid: os.kill(pid, signal.SIGSTOP))
        assert client, f"no `docker load` started: {proc.communicate(timeout=600)}"
        _ctrl_c(proc, client)
        got = _engine("docker", "image", "inspect", "--format", "{{.Id}}", tag, check=False)
        assert got.stdout.strip() == ident, got.stdout + got.stderr
    finally:
        _let_go(proc, client)
        if client:
            until = time.monotonic() + 600  # (its load is not stopped: what it loads is then removed)
            while Path(f"/proc/{client}").exists() and time.monotonic() < until:
                time.sleep(0.1)
        _engine("docker", "rmi", tag, check=False)
        _engine("docker", "rmi", ident, check=False)


@pytest.mark.slow
@pytest.mark.container
def test_ctrl_c_while_podman_reads_the_image_leaves_nothing_behind(demo_build, test_base, tmp_path):  # noqa: F811
    """Ctrl-C while `podman load` is part way through the archive it reads from the pipe (held there: podman
    stopped as soon as it is seen and let run in slices until it has made its temporary copy of the archive and
    the tool is blocked writing the rest; made again when podman read it all in those slices): exit 130, podman ends by itself (the stream cut
    short: it names no image) before the tool does, no image under the tag, and its temporary copy of the
    archive is gone (SIGTERM left it in /var/tmp, a file per stopped load)."""
    import os

    from tests.test_image import _engine

    for attempt in range(3):  # (podman may read the whole archive in the slices it is let run: made again)
        tag = f"localhost/i49-ctrlc-feed:{attempt + 1}"
        (tmp_path / str(attempt)).mkdir()
        proc = _image_loading("podman", tag, demo_build.out / "stack.lock.toml", test_base, tmp_path / str(attempt))
        loader, part_way = 0, False
        try:
            loader = _child(proc, "podman load", 300, then=lambda pid: os.kill(pid, signal.SIGSTOP))
            assert loader, f"no `podman load` started: {proc.communicate(timeout=600)}"
            copy, until = "", time.monotonic() + 600
            # part way: podman has made its temporary copy of the archive (a file per load, which SIGTERM left
            # behind) and the tool waits to write more of the archive into the pipe
            while not (part_way := bool(_writing_blocked(proc) and (copy := copy or _temp_copy(loader)))):
                assert time.monotonic() < until and proc.poll() is None, proc.communicate(timeout=600)
                os.kill(loader, signal.SIGCONT)  # a slice as short as can be: a read or two of the pipe at most
                os.kill(loader, signal.SIGSTOP)
                if not _stopped(loader):
                    break  # (it read the whole archive and ended)
            if not part_way:
                continue
            _ctrl_c(proc, loader)
            assert not os.path.exists(copy), f"podman's copy of the archive was left: {copy}"
            assert _engine("podman", "image", "inspect", tag, check=False).returncode != 0
            return
        finally:
            _let_go(proc, loader)
            _engine("podman", "rmi", tag, check=False)
    pytest.fail("podman read the whole archive before it was seen part way, three times")


def _ctrl_c(proc: subprocess.Popen[str], child: int) -> None:
    """Ctrl-C (SIGINT to the whole foreground group, as a terminal sends it) to the tool, its stopped `child` let
    go: the tool exits 130, and `child` has ended before it did."""
    import os

    os.killpg(proc.pid, signal.SIGINT)
    os.kill(child, signal.SIGCONT)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, err
    assert not Path(f"/proc/{child}").exists(), f"the tool's {_command(child)} outlived it"


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().replace("\0", " ").strip() or str(pid)
    except OSError:
        return str(pid)


def _let_go(proc: subprocess.Popen[str], child: int) -> None:
    """After a test: its stopped `child` let run, the tool killed if it still runs."""
    import os

    if child:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGCONT)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _fed_whole(client: int) -> bool:
    """Whether docker's client `client` (stopped) has sent the whole archive it read from its input: Go's HTTP
    client closes a request's body (its stdin, the pipe the tool writes) once it has sent all of it, which it
    reaches only when the tool has written the archive whole and closed its end."""
    import os

    return os.path.isdir(f"/proc/{client}/fd") and not os.path.lexists(f"/proc/{client}/fd/0")


def test_ctrl_c_while_the_image_is_made_stops_the_podman_load_started_beside_it(demo_build, test_base, tmp_path):  # noqa: F811
    """`--load podman` starts `podman load` (reading its archive from a pipe) before the image is made, so that
    podman's own start overlaps the making. Ctrl-C while the image is still being made (a new cache: the base
    saved, the modules compiled in a container, seconds): exit 130, the podman it started ended and reaped
    (none left running once the tool has exited), no image under the tag, no archive left in the cache."""
    import os

    from tests.test_image import _engine

    tag = "localhost/i49-ctrlc-podman:1"
    proc = _image_loading("podman", tag, demo_build.out / "stack.lock.toml", test_base, tmp_path)
    try:
        loader = _child(proc, "podman load", 300)
        assert loader, f"no `podman load` started beside the making: {proc.communicate(timeout=600)}"
        assert not (tmp_path / "cache" / "images" / "layers").is_dir() or \
            not list((tmp_path / "cache" / "images" / "layers").iterdir()), "the layer was made before podman started"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert "interrupted" in err, err
        assert not Path(f"/proc/{loader}").exists(), "the podman load the tool started outlived it"
        assert _engine("podman", "image", "inspect", tag, check=False).returncode != 0
        work = tmp_path / "cache" / "images" / "work"
        assert not work.is_dir() or not [p for p in work.iterdir() if p.suffix == ".tar"], list(work.iterdir())
    finally:
        if proc.poll() is None:
            proc.kill()
        _engine("podman", "rmi", tag, check=False)


def _image_loading(engine: str, tag: str, lock: Path, base: str, tmp_path: Path,
                   remove: bool = True) -> subprocess.Popen[str]:
    """`toolchain image --load ENGINE` of `lock` started (in a session of its own, as a shell's foreground job
    leads its group), with a cache of its own under `tmp_path`; nothing under `tag` in `engine` first (unless
    not `remove`)."""
    import sys

    from tests.test_image import _engine

    if remove:
        _engine(engine, "rmi", tag, check=False)
    return subprocess.Popen([sys.executable, "-m", "toolchain", "image", "--lock", lock, "--tag", tag, "--base", base,
                             "--cache-dir", tmp_path / "cache", "--load", engine], cwd=tmp_path,
                            env={**isolated_env(tmp_path), **containers_env()}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _child(proc: subprocess.Popen[str], command: str, seconds: float,
           then: Callable[[int], None] = lambda pid: None) -> int:
    """The pid of the first child of `proc` whose command line holds `command` (`then` called with it as soon
    as it is seen), looked for every 5 ms for `seconds`; 0 when none appeared (or `proc` ended)."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        listed = subprocess.run(["pgrep", "-P", str(proc.pid), "-f", command], capture_output=True,
                                text=True).stdout.split()
        if listed:
            then(int(listed[0]))
            return int(listed[0])
        time.sleep(0.005)
    return 0


def _writing_blocked(proc: subprocess.Popen[str]) -> bool:
    """Whether the tool's main thread waits to write into a full pipe (its kernel wait channel "pipe_write", or
    "anon_pipe_write"), looked at for a moment: while its reader is stopped, it comes to that or to the end of
    what it writes."""
    for _ in range(2000):
        try:
            with open(f"/proc/{proc.pid}/wchan") as f:
                if "pipe_write" in f.read():
                    return True
        except OSError:
            return False
        time.sleep(0.001)
    return False


def _temp_copy(pid: int) -> str:
    """The file `podman load` (process `pid`) copies the archive it reads from its input into ("" when none)."""
    import os

    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return ""
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if os.path.basename(target).startswith("podman") and os.path.isfile(target):
                return target
    return ""


def _status(pid: int, field: str) -> str:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(field + ":")), "")
    except OSError:
        return ""


def _stopped(pid: int) -> bool:
    """Whether `pid` is stopped by a signal (waited for a moment: SIGSTOP takes effect when it is next scheduled)."""
    import time

    for _ in range(1000):
        state = _status(pid, "State")
        if not state or state.startswith(("T", "Z", "X")):
            return state.startswith("T")
        time.sleep(0.001)
    return False


@pytest.mark.slow
@pytest.mark.container
def test_two_cold_builds_of_the_demo_give_one_lock_one_bundle_and_one_image(test_base, tmp_path):  # noqa: F811
    from tests.test_image import _image

    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    outs = []
    for i, where in enumerate(("a", "b/nested")):
        out = tmp_path / where / "out"
        r = cli("build", "--recipe", "demo", "--cache-dir", tmp_path / where / "cache", "--out", out, "--bundle",
                "--json", timeout=900)
        assert r.returncode == 0, str(r)
        outs.append((out, r.json()["bundle"], _image(tmp_path, str(i), out / "stack.lock.toml", "--tag",
                                                     "localhost/i49-twice:1", "--base", test_base)))
    (a, bundle_a, image_a), (b, bundle_b, image_b) = outs
    assert (a / "stack.lock.toml").read_bytes() == (b / "stack.lock.toml").read_bytes()
    assert (a / "build-record.toml").read_bytes() != (b / "build-record.toml").read_bytes()  # (each run's own)
    from pathlib import Path

    assert Path(bundle_a + ".tar.gz").read_bytes() == Path(bundle_b + ".tar.gz").read_bytes()
    assert image_a["digest"] == image_b["digest"], (image_a, image_b)
    text = (a / "stack.lock.toml").read_text()
    assert str(tmp_path) not in text and "resolved-at" not in text and "wall-seconds" not in text
