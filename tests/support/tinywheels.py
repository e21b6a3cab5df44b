"""Tiny real projects in real git repositories, built into real wheels with `pip wheel --no-build-isolation`.

`build_stack()` is a minimal stand-in for the build spine (used by the reproducibility and bundle tests):
clone each pinned commit into `<out>/../src/<name>`, apply its patches, build it with (or, for a control,
without) `determinism.deterministic_env`, normalize the wheel, and write a real lock with `lock.write_lock`.

Projects:
  STAMPED  writes its build time (SOURCE_DATE_EPOCH when set, else time.time()) into a module and compiles
           a C extension whose __FILE__ and debug info carry the absolute build path;
  NOISY    writes 64 random bytes into the package at every build: it can never be reproducible;
  PURE     plain Python with an executable script file (its 0755 must survive normalization).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from toolchain import lock as lockmod
from toolchain.build.cache import WHEELS_DIR, WheelRef
from toolchain.build.determinism import commit_epoch, deterministic_env
from toolchain.build.wheelnorm import normalize_wheel
from toolchain.core.fs import sha256_file
from toolchain.core.proc.runner import merge_env, run
from toolchain.recipe.model import Patch
from toolchain.target.facts import TargetInfo, ToolchainInfo

COMMIT_DATE = "2023-11-14T22:13:20+00:00"  # = epoch 1700000000
COMMIT_EPOCH = 1700000000
BUILD_TIMEOUT = 300

STAMPED = {
    "setup.py": '''\
import os, time
from setuptools import setup, Extension
here = os.path.dirname(os.path.abspath(__file__))
stamp = int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))
with open(os.path.join(here, "stamped", "_stamp.py"), "w") as f:
    f.write(f"BUILD_TIME = {stamp}\\n")
setup(name="stamped", version="1.0", packages=["stamped"],
      ext_modules=[Extension("stamped._where", [os.path.join(here, "where.c")], extra_compile_args=["-g"])])
''',
    "where.c": '''\
#include <Python.h>
static PyObject *where(PyObject *self, PyObject *args) { return PyUnicode_FromString(__FILE__); }
static PyMethodDef methods[] = {{"where", where, METH_NOARGS, "the source file"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_where", NULL, -1, methods};
PyMODINIT_FUNC PyInit__where(void) { return PyModule_Create(&mod); }
''',
    "stamped/__init__.py": "GREETING = 'hello'\n",
}

NOISY = {
    "setup.py": '''\
import os
from setuptools import setup
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "noisy", "noise.bin"), "wb") as f:
    f.write(b"NOISE:" + os.urandom(64))
setup(name="noisy", version="1.0", packages=["noisy"], package_data={"noisy": ["noise.bin"]})
''',
    "noisy/__init__.py": "",
}

PURE = {
    "setup.py": '''\
from setuptools import setup
setup(name="pure", version="2.0", packages=["pure"], package_data={"pure": ["run.sh"]})
''',
    "pure/__init__.py": "VALUE = 42\n",
    "pure/run.sh": "#!/bin/sh\necho pure\n",
}
EXECUTABLES = {"pure/run.sh"}


def require_wheel_backend() -> None:
    """`pip wheel --no-build-isolation` needs a setuptools that can build wheels (>= 70.1, or `wheel`)."""
    if importlib.util.find_spec("wheel") or importlib.util.find_spec("setuptools.command.bdist_wheel"):
        return
    message = ("setuptools cannot build wheels here: install setuptools>=70.1 (or the `wheel` package) "
               "into the test environment")
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@dataclass(frozen=True)
class Project:
    name: str
    repo: Path
    commit: str
    patches: tuple[str, ...] = ()   # relative to the patches dir given to build_stack


def git(*args: str, cwd: Path) -> str:
    env = merge_env(os.environ, {"GIT_AUTHOR_DATE": COMMIT_DATE, "GIT_COMMITTER_DATE": COMMIT_DATE,
                                 "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"})
    return run(["git", "-c", "user.name=Test", "-c", "user.email=test@example.invalid", *args],
               cwd=cwd, env=env, capture=True, timeout=60).stdout.strip()


def make_repo(root: Path, name: str, files: dict[str, str]) -> Project:
    """A git repository with one commit (committer date COMMIT_DATE) holding `files`."""
    repo = root / f"{name}-repo"
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if rel in EXECUTABLES:
            path.chmod(0o755)
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", f"{name} 1.0", cwd=repo)
    return Project(name, repo, git("rev-parse", "HEAD", cwd=repo))


def pip_wheel(src: Path, wheels: Path, env: dict[str, str], log: Path) -> Path:
    before = set(wheels.glob("*.whl")) if wheels.is_dir() else set()
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", str(src),
         "-w", str(wheels)], env=env, log=log, timeout=BUILD_TIMEOUT)
    (new,) = set(wheels.glob("*.whl")) - before
    return new


def build_stack(projects: list[Project], out_dir: Path, *, deterministic: bool = True,
                patches_dir: Path | None = None, recipe_name: str = "tiny") -> lockmod.Lock:
    """Build `projects` in order into `out_dir` (sources under `out_dir/../src`); return the lock read back."""
    src_root = out_dir.parent / "src"
    wheels = out_dir / WHEELS_DIR
    recipe = out_dir.parent / f"{recipe_name}.toml"
    recipe.parent.mkdir(parents=True, exist_ok=True)
    recipe.write_text('description = "tiny test stack"\n')
    components, applied = [], set()
    for i, project in enumerate(projects):
        src = src_root / project.name
        git("clone", "-q", str(project.repo), str(src), cwd=out_dir.parent)
        git("checkout", "-q", project.commit, cwd=src)
        patch_refs = []
        for rel in project.patches:
            assert patches_dir is not None, f"{project.name} has patches: build_stack needs patches_dir"
            patch = patches_dir / rel
            git("apply", str(patch), cwd=src)
            patch_refs.append(Patch(rel, sha256_file(patch)))
        env = merge_env(os.environ, {"SOURCE_DATE_EPOCH": None, "PIP_NO_INPUT": "1",
                                     "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        epoch = commit_epoch(src, project.commit)
        if deterministic:
            env.update(deterministic_env(src, project.name, epoch, base_env=env))
        started = time.monotonic()
        wheel = pip_wheel(src, wheels, env, out_dir / "logs" / f"{project.name}.log")
        if deterministic:
            applied.update(normalize_wheel(wheel, epoch))
        components.append(lockmod.LockedComponent(
            name=project.name, url=project.repo.as_uri(), ref="main", commit=project.commit, describe="",
            subdir="", after=(projects[i - 1].name,) if i else (), dist=project.name,
            import_name=project.name, version="", install_args=("--no-deps", "--force-reinstall"),
            patches=tuple(patch_refs), env={}, command=("{python}", "-m", "pip", "wheel", "{src}"),
            cache_key=project.commit[:16], build_seconds=time.monotonic() - started,
            wheel=WheelRef(wheel.name, sha256_file(wheel), wheel.stat().st_size)))
    lock = lockmod.Lock(recipe_name=recipe_name, recipe_path=str(recipe), recipe_sha256=sha256_file(recipe),
                        recipe_text="", toolchain=ToolchainInfo(),
                        target=TargetInfo(python=sys.executable, container=f"build-{time.time_ns()}"),
                        smoke={}, components=tuple(components), normalizations=tuple(sorted(applied)))
    return lockmod.read_lock(lockmod.write_lock(lock, out_dir))
