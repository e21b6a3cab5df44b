"""The Debian bookworm test image runs under podman: python3 is 3.11 and gcc works."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from tests.support.container_fixtures import assert_no_containers_left, podman_image  # noqa: F401  (pytest fixtures)

LABEL = "org.toolchain.test=container-image"


def _podman_run(image: str, *argv: str) -> subprocess.CompletedProcess:
    name = f"toolchain-test-{uuid.uuid4().hex[:12]}"
    proc = subprocess.run(
        ["podman", "run", "--rm", "--name", name, "--label", LABEL, image, *argv],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"podman run {' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}"
    return proc


@pytest.fixture
def no_leftovers():
    yield
    assert_no_containers_left("podman", LABEL)


def test_python_is_bookworms_3_11(podman_image, no_leftovers):  # noqa: F811  (the imported fixture)
    proc = _podman_run(podman_image, "python3", "-c", "import sys; print(sys.version)")
    assert proc.stdout.startswith("3.11."), proc.stdout


def test_gcc_runs(podman_image, no_leftovers):  # noqa: F811  (the imported fixture)
    proc = _podman_run(podman_image, "gcc", "--version")
    assert proc.stdout.startswith("gcc"), proc.stdout
    assert "12." in proc.stdout.splitlines()[0]  # bookworm's gcc 12
