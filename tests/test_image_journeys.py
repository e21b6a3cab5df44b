"""The small journeys of `toolchain image` and of what a bundle says about images (issue 49): each at its cause."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import subprocess
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
def test_ctrl_c_during_a_docker_load_leaves_no_image_in_docker(demo_build, test_base, tmp_path):  # noqa: F811
    """Ctrl-C reaches the tool while its `docker load` has sent the whole archive and not yet ended, and the
    daemon has loaded the image by itself: what a stop in that window leaves behind unless the tool removes it.
    Held there deterministically: the client is stopped (SIGSTOP) as soon as it is seen and let run in slices,
    each ended by a stop, until it has read its archive and closed it; a stopped process cannot exit, so the
    window cannot pass unseen. The daemon then finishes the load while the client stays stopped; Ctrl-C; the
    client is let go once the tool's stop signal is pending for it."""
    import os
    import time

    from tests.test_image import _engine

    tag = "localhost/i49-ctrlc:1"
    proc = _image_loading("docker", tag, demo_build.out / "stack.lock.toml", test_base, tmp_path)
    client = 0
    try:
        client = _child(proc, "docker load", 600, then=lambda pid: os.kill(pid, signal.SIGSTOP))
        assert client, f"no `docker load` started: {proc.communicate(timeout=600)}"
        read = 0.0  # (how much of the archive it read when last seen holding it open)
        while _stopped(client) and read < 1.0:
            now = _archive_read(client)
            if now is None and read > 0:  # read and closed: the whole archive sent (Go's client closes it then)
                break
            read = now or 0.0
            os.kill(client, signal.SIGCONT)  # a slice: longer while much is left, short near the end
            time.sleep(0.02 if read < 0.5 else 0.002)
            with contextlib.suppress(ProcessLookupError):
                os.kill(client, signal.SIGSTOP)
        assert _stopped(client), f"the client ended before it was seen to read its whole archive ({read:.0%})"
        until = time.monotonic() + 300  # the daemon loads what it was sent, its client stopped before hearing so
        while _engine("docker", "image", "inspect", tag, check=False).returncode != 0 and time.monotonic() < until:
            time.sleep(0.2)
        assert _engine("docker", "image", "inspect", tag, check=False).returncode == 0, "docker did not load it"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
        until = time.monotonic() + 60
        while not _stop_pending(client) and time.monotonic() < until:  # (the tool stops its child in turn)
            time.sleep(0.01)
        os.kill(client, signal.SIGCONT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert _engine("docker", "image", "inspect", tag, check=False).returncode != 0
        made = _engine("docker", "images", "-q", "--filter", "reference=localhost/i49-ctrlc").stdout.split()
        assert not made, made
    finally:
        if client:
            with contextlib.suppress(ProcessLookupError):
                os.kill(client, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
        _engine("docker", "rmi", tag, check=False)


@pytest.mark.slow
@pytest.mark.container
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


def _image_loading(engine: str, tag: str, lock: Path, base: str, tmp_path: Path) -> subprocess.Popen[str]:
    """`toolchain image --load ENGINE` of `lock` started (in a session of its own, as a shell's foreground job
    leads its group), with a cache of its own under `tmp_path`; nothing under `tag` in `engine` first."""
    import sys

    from tests.test_image import _engine

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


def _stop_pending(pid: int) -> bool:
    """Whether a SIGINT or SIGTERM waits for `pid` (sent to it while it is stopped), or it is gone."""
    bits = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
    return not _status(pid, "State") or any(int(_status(pid, f) or "0", 16) & bits for f in ("ShdPnd", "SigPnd"))


def _archive_read(pid: int) -> float | None:
    """How much of the image-*.tar that process `pid` holds open it has read (its fd's position over the file's
    size); None when it holds none."""
    import os

    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if "/image-" not in target or not target.endswith(".tar"):
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                pos = int(info.read().split()[1])
            return pos / os.path.getsize(target)
        except (OSError, ValueError, IndexError, ZeroDivisionError):
            continue
    return None


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
