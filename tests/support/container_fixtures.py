"""pytest fixtures for tests that run real containers.

Register them once in tests/conftest.py::

    pytest_plugins = ["tests.support.container_fixtures"]

(or import the fixtures into a test module).  ``podman_image`` / ``docker_image``
skip the test with the reason when the engine is unusable; an engine named in
TOOLCHAIN_REQUIRE_CONTAINERS (comma-separated, e.g. "podman" in CI after
ci_setup.sh) makes them fail instead, so a broken setup cannot hide behind skips.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from .debian_image import (
    ImageBuildError,
    configure_containers_conf,
    containers_env,
    docker_available,
    ensure_image,
    podman_available,
)


def _required(engine: str) -> bool:
    wanted = os.environ.get("TOOLCHAIN_REQUIRE_CONTAINERS", "").lower().replace(" ", "")
    return engine in wanted.split(",")


def _unusable(engine: str, message: str) -> None:
    if _required(engine):
        pytest.fail(f"{message} (TOOLCHAIN_REQUIRE_CONTAINERS names {engine})", pytrace=False)
    pytest.skip(message)


def _image_for(engine: str) -> str:
    ok, reason = podman_available() if engine == "podman" else docker_available()
    if not ok:
        _unusable(engine, f"{engine} unusable: {reason}")
    try:
        return ensure_image(engine)
    except ImageBuildError as e:
        if os.geteuid() != 0:  # cannot debootstrap as non-root: an environment limit, not a bug
            _unusable(engine, f"no {engine} test image: {e}")
        raise


@pytest.fixture(scope="session")
def podman_image() -> str:
    """Name of the Debian bookworm test image in podman (built once, cached by content)."""
    configure_containers_conf()
    return _image_for("podman")


@pytest.fixture(scope="session")
def docker_image() -> str:
    """Name of the Debian bookworm test image in docker; skips when no docker engine answers."""
    return _image_for("docker")


def _containers(engine: str, label_or_prefix: str) -> list[str]:
    """Names of containers (running or not) that match ``label_or_prefix``:
    ``label=KEY[=VALUE]`` or ``KEY=VALUE`` selects by label, anything else is a name prefix."""
    spec = label_or_prefix
    argv = [engine, "ps", "-a", "--format", "{{.Names}}"]
    if spec.startswith("label="):
        argv += ["--filter", spec]
    elif "=" in spec:  # container names cannot contain "="
        argv += ["--filter", f"label={spec}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env=containers_env())
    if proc.returncode != 0:
        raise AssertionError(f"`{' '.join(argv)}` failed: {proc.stderr.strip()}")
    names = proc.stdout.split()
    if "=" not in spec:
        names = [n for n in names if n.startswith(spec)]
    return names


def assert_no_containers_left(engine: str, label_or_prefix: str, *, remove: bool = True) -> None:
    """Fail when containers matching ``label_or_prefix`` still exist (see ``_containers``).

    With ``remove`` (default) the leftovers are force-removed before failing, so one
    leaking test does not make the following ones fail too.
    """
    left = _containers(engine, label_or_prefix)
    if not left:
        return
    if remove:
        subprocess.run([engine, "rm", "-f", "--", *left], capture_output=True, timeout=300,
                       stdin=subprocess.DEVNULL, env=containers_env())
    raise AssertionError(f"{engine} containers left behind matching {label_or_prefix!r}: {', '.join(left)}")
