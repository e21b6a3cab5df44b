"""Journeys: each test is one user's whole path, run as the user runs it (issue 19).

The package is installed NON-editable (its wheel, built once per test session from a copy of the checkout)
into a fresh venv; `toolchain` is that venv's entry point, run with PYTHONPATH unset in a fresh directory
outside the checkout, so nothing of the checkout (its recipes/, patches/, demo sources) is on the way.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.spine_helpers import REPO_ROOT, Cli

TOP_SKIP = {".git", "tests", "benchmarks", "build", "dist", ".nox", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def _skip(directory: str, names: list[str]) -> set[str]:
    """What the copy of the checkout leaves out: its top level's tests, caches, build output (not the
    package's own build/ stage) and virtualenvs (the README's .venv, any with a pyvenv.cfg), byte code and
    egg-info anywhere."""
    top = Path(directory) == REPO_ROOT
    return {n for n in names if (top and (n in TOP_SKIP or (Path(directory) / n / "pyvenv.cfg").is_file()))
            or n == "__pycache__" or n.endswith(".egg-info")}


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


def _site_dirs() -> list[str]:
    """The site directories of the interpreter running the suite, as it sees them: its user site (when
    enabled) and its site-packages. In a venv that is the venv's own (and the base's only when that venv was
    made with --system-site-packages), never the base interpreter's behind it."""
    user = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    return [d for d in dict.fromkeys(user + site.getsitepackages()) if os.path.isdir(d)]


def _sees_this_interpreter(venv: Path, env: dict[str, str]) -> None:
    """A .pth in `venv` that adds this interpreter's site directories after the venv's own, as site dirs
    (their .pth files processed, as `--system-site-packages` does for the base interpreter's)."""
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, env=env, capture_output=True, text=True, timeout=60).stdout.strip()
    lines = [f"import site; site.addsitedir({d!r})" for d in _site_dirs()]
    (Path(purelib) / "_journeys_suite_interpreter.pth").write_text("\n".join(lines) + "\n")


def _distributions(python: str, env: dict[str, str], cwd: Path) -> dict[str, str]:
    """{distribution name: where it is} as `python` resolves each name (the first on its sys.path)."""
    code = ("import importlib.metadata as m, json\n"
            "seen = {}\n"
            "for d in m.distributions():\n"
            "    seen.setdefault((d.metadata['Name'] or '').lower(), str(d.locate_file('')))\n"
            "print(json.dumps(seen))")
    out = subprocess.run([python, "-c", code], check=True, env=env, capture_output=True, text=True, cwd=cwd,
                         timeout=60).stdout
    return dict(json.loads(out))


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> Installed:
    """The wheel of this checkout (pip wheel of a copy: the checkout gets no build/ or egg-info), installed
    with --no-deps into a fresh venv that sees exactly the running interpreter's packages (the dependencies):
    a .pth names its site directories (see `_sees_this_interpreter`), also when the suite runs in a venv."""
    root = tmp_path_factory.mktemp("installed")
    src = root / "src"
    shutil.copytree(REPO_ROOT, src, symlinks=True, ignore=_skip)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(root / "wheel"), str(src)], check=True, env=env, capture_output=True, timeout=300)
    (wheel,) = (root / "wheel").glob("xpu_toolchain-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env, timeout=300)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
                   check=True, env=env, capture_output=True, timeout=300)
    _sees_this_interpreter(venv, env)  # after the install: pip sees nothing outside the venv
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import toolchain; print(toolchain.__file__)"],
                           check=True, env=env, capture_output=True, text=True, cwd=root, timeout=60).stdout.strip()
    package = Path(where).parent
    assert package.is_relative_to(venv) and not package.is_relative_to(REPO_ROOT), where  # not the checkout
    missing = sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "toolchain").rglob("*.py")
                     if not (package / p.relative_to(REPO_ROOT / "toolchain")).is_file())
    assert not missing, f"the wheel lacks {missing}"  # (a module missing would be taken from elsewhere)
    # every distribution the suite's interpreter has is seen by the venv, from the same place (but those the
    # venv has itself: the tool, pip), and the venv sees no other (a base interpreter's behind a virtualenv)
    mine, seen = _distributions(sys.executable, env, root), _distributions(str(venv / "bin" / "python"), env, root)
    differ = {n: (mine.get(n), seen.get(n)) for n in sorted({*mine, *seen})
              if mine.get(n) != seen.get(n) and not Path(seen.get(n, "/")).is_relative_to(venv)}
    assert not differ, f"the installed tool's venv sees other packages than the suite's interpreter " \
                       f"(name: (where the suite's interpreter has it, where the venv sees it)): {differ}"
    return Installed(venv, package)


@pytest.fixture
def make_user(installed):
    """UserCli(cwd, home, env) for the installed tool."""
    return lambda cwd, home, env=None: UserCli(installed, cwd, home, env)


@pytest.fixture
def user(installed, tmp_path) -> UserCli:
    """A user with an empty home directory outside the checkout, working in ~/work."""
    return UserCli(installed, tmp_path / "home" / "work", tmp_path / "home")
