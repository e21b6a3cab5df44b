"""Journeys: each test is one user's whole path, run as the user runs it (issue 19).

The package is installed NON-editable (its wheel, built once per test session from a copy of the checkout)
into a fresh venv; `toolchain` is that venv's entry point, run with PYTHONPATH unset in a fresh directory
outside the checkout, so nothing of the checkout (its recipes/, patches/, demo sources) is on the way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.spine_helpers import REPO_ROOT, Cli

TOP_SKIP = {".git", "tests", "benchmarks", "build", "dist", ".nox", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def _skip(directory: str, names: list[str]) -> set[str]:
    """What the copy of the checkout leaves out: its top level's tests, caches and build output (not the
    package's own build/ stage), byte code and egg-info anywhere."""
    top = Path(directory) == REPO_ROOT
    return {n for n in names if (top and n in TOP_SKIP) or n == "__pycache__" or n.endswith(".egg-info")}


@dataclass(frozen=True)
class Installed:
    venv: Path
    package: Path  # where the installed `toolchain` package lives (inside the venv)

    @property
    def toolchain(self) -> Path:
        return self.venv / "bin" / "toolchain"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


class UserCli(Cli):
    """`toolchain ARGS` as a user types it: the venv's entry point, in `cwd`, PYTHONPATH unset, the cache under
    `home` (an isolated $TOOLCHAIN_CACHE_DIR and XDG cache)."""

    def __init__(self, installed: Installed, cwd: Path, home: Path, env: dict[str, str] | None = None) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        drop = ("TOOLCHAIN_", "TINY_", "SETVARS_", "CMPLR_ROOT", "ONEAPI_ROOT", "PYTHONPATH", "VIRTUAL_ENV")
        base = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        super().__init__(cwd, {**base, "TOOLCHAIN_CACHE_DIR": str(home / "cache"),
                               "XDG_CACHE_HOME": str(home / "xdg-cache"), "PIP_NO_INDEX": "1",
                               "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1",
                               "PATH": f"{installed.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
                               **(env or {})})
        self.installed = installed

    def argv(self, args) -> list[str]:
        return [str(self.installed.toolchain), *map(str, args)]

    def at(self, cwd: Path) -> UserCli:
        """The same user (cache, environment) working in another directory."""
        other = UserCli(self.installed, cwd, Path(self.env["TOOLCHAIN_CACHE_DIR"]).parent)
        other.env = dict(self.env)
        return other


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> Installed:
    """The wheel of this checkout (pip wheel of a copy: the checkout gets no build/ or egg-info), installed
    with --no-deps into a fresh venv that sees the interpreter's packages (the dependencies)."""
    root = tmp_path_factory.mktemp("installed")
    src = root / "src"
    shutil.copytree(REPO_ROOT, src, symlinks=True, ignore=_skip)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(root / "wheel"), str(src)], check=True, env=env, capture_output=True, timeout=300)
    (wheel,) = (root / "wheel").glob("xpu_toolchain-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
                   check=True, env=env, capture_output=True, timeout=300)
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import toolchain; print(toolchain.__file__)"],
                           check=True, env=env, capture_output=True, text=True, cwd=root, timeout=60).stdout.strip()
    package = Path(where).parent
    assert package.is_relative_to(venv) and not package.is_relative_to(REPO_ROOT), where  # not the checkout
    missing = sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "toolchain").rglob("*.py")
                     if not (package / p.relative_to(REPO_ROOT / "toolchain")).is_file())
    assert not missing, f"the wheel lacks {missing}"  # (a module missing would be taken from elsewhere)
    return Installed(venv, package)


@pytest.fixture
def make_user(installed):
    """UserCli(cwd, home, env) for the installed tool."""
    return lambda cwd, home, env=None: UserCli(installed, cwd, home, env)


@pytest.fixture
def user(installed, tmp_path) -> UserCli:
    """A user with an empty home directory outside the checkout, working in ~/work."""
    return UserCli(installed, tmp_path / "home" / "work", tmp_path / "home")
