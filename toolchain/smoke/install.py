"""Install a lock's wheels into a Python environment in lock order, then check the installed versions.

The environment is an `Interpreter` (toolchain.target.base): a Python in a `Runtime`, on this machine or in a
container, that the runtime made a fresh venv for or that exists already. The runtime says where it sees the
lock's files (`visible_path`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypedDict

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from toolchain.core.record import field, record
from toolchain.core.serial import Data, meta, to_table
from toolchain.errors import TestFailed, UsageError
from toolchain.lock import Lock, wheel_name_version
from toolchain.target import HostRuntime, Interpreter

KERNEL_ARGS = ("--no-deps", "--force-reinstall")
INSTALL_TIMEOUT = 3600


def create_venv(base_python: str, path: Path, log: Path) -> Interpreter:
    """A fresh virtual environment on this machine (an existing one at `path` is cleared)."""
    return HostRuntime().make_venv(base_python, str(path), log)


def _file_name(path: Path) -> Data:
    return path.name


@record
class InstallStep:
    """One wheel to install into the smoke environment, with the pip arguments its component asks for."""
    component: str
    wheel: Path = field(metadata=meta(dump=_file_name))  # a report names the file
    args: tuple[str, ...]


Progress = Callable[[InstallStep], object]  # told of each step before it runs


def install_plan(lock: Lock) -> tuple[InstallStep, ...]:
    """Lock order. The first component with its install-args; later (kernel) wheels always with
    --no-deps --force-reinstall, so their requirements cannot replace what the first one pinned."""
    steps = []
    for i, c in enumerate(lock.components):
        args = tuple(c.install_args)
        if i > 0:
            args += tuple(a for a in KERNEL_ARGS if a not in args)
        steps.append(InstallStep(c.name, lock.wheel_path(c), args))
    return tuple(steps)


def pip_argv(target: Interpreter, step: InstallStep, find_links: str) -> list[str]:
    """The pip command installing one wheel into the target's interpreter, from the local wheels only."""
    return [target.python, "-m", "pip", "install", "--no-input", "--progress-bar", "off",
            "--find-links", find_links, *step.args, target.runtime.visible_path(step.wheel)]


def install(lock: Lock, target: Interpreter, log: Path, progress: Progress | None = None, *, allow_unlocked: bool = False,
            staged: Staged | None = None) -> tuple[InstallStep, ...]:
    """Exactly the lock: its dependency files and built wheels, hashes required, nothing from an index
    (`install_locked`). A lock without a resolved closure (--no-resolve, older locks) gets its built wheels
    alone, the same way: a dependency they need is an error (`UnlockedDependencies`), unless
    `allow_unlocked` (smoke --allow-unlocked-deps): lock order, the first with its deps from the index."""
    if lock.closure is None and allow_unlocked:
        return install_unlocked(lock, target, log, progress)
    return install_locked(lock, target, log, progress, staged=staged)


def install_unlocked(lock: Lock, target: Interpreter, log: Path,
                     progress: Progress | None = None) -> tuple[InstallStep, ...]:
    """Lock order, the first component with its install-args (its dependencies from whatever the index serves)."""
    steps = install_plan(lock)
    links = target.runtime.visible_path(lock.wheels_dir)
    for step in steps:
        if progress is not None:
            progress(step)
        target.run(pip_argv(target, step, links), log=log, timeout=INSTALL_TIMEOUT)
    return steps


@record
class VersionCheck:
    """A component's version as the lock records it against what the environment has installed."""
    component: str
    dist: str
    locked: str
    installed: str | None

    @property
    def ok(self) -> bool:
        """Whether the installed version is the locked one (compared as versions)."""
        if self.installed is None:
            return False
        try:
            return Version(self.installed) == Version(self.locked)
        except InvalidVersion:
            return self.installed == self.locked

    def to_dict(self) -> dict[str, Data]:
        """The report's table: the fields, and whether the versions agree."""
        return {**to_table(self), "ok": self.ok}


def installed_versions(target: Interpreter, dists: Sequence[str], log: Path | None = None) -> dict[str, str | None]:
    """The installed version of each distribution in the target's interpreter (None when not installed)."""
    done = target.run([target.python, "-I", target.script("dists.py"), *dists], capture=True, log=log, timeout=300)
    found: dict[str, dict[str, str] | None] = json.loads(done.stdout.strip().splitlines()[-1])  # dists.py's JSON
    return {name: d["version"] if d else None for name, d in found.items()}


def check_versions(lock: Lock, target: Interpreter, log: Path | None = None) -> tuple[VersionCheck, ...]:
    """What the target has against what the lock's wheels carry (the wheel file names' versions)."""
    wanted = []
    for c in lock.components:
        name, version = wheel_name_version(c.wheel.file)
        wanted.append((c.name, str(canonicalize_name(c.dist or name)), version))
    found = installed_versions(target, [d for _, d, _ in wanted], log) if wanted else {}
    return tuple(VersionCheck(comp, dist, version, found.get(dist)) for comp, dist, version in wanted)


def require_versions(checks: Sequence[VersionCheck], where: str) -> None:
    """Raise an error listing every distribution whose installed version is not the locked one."""
    bad = [c for c in checks if not c.ok]
    if bad:
        lines = [f"  - {c.dist} ({c.component}): installed {c.installed or 'nothing'}, the lock has {c.locked}"
                 for c in bad]
        raise TestFailed(f"installed versions in {where} do not match the lock; nothing was served:\n"
                         + "\n".join(lines),
                         hint="install from the lock (drop --no-install), or check what else pinned these packages")


# ---- a resolved lock: the closure, exactly ------------------------------------------------------------

CLOSURE_ARGS = ("--no-index", "--no-deps", "--require-hashes", "--force-reinstall")
REQUIREMENTS_NAME = "requirements.lock.txt"


class UnlockedDependencies(UsageError):
    """A lock that pins no closure, whose built wheels need distributions: installing them would be a download
    of whatever the index serves today (exit 2: resolve the lock first)."""


def closure_files(lock: Lock, log: Path) -> list[tuple[str, Path, str]]:
    """(name, local file, sha256) of every locked file: the dependencies (fetched into wheels/deps/ with their
    hashes checked) and the built wheels, in that order. A lock without a closure: the built wheels."""
    from toolchain.resolve.closure import DEPS_DIR
    from toolchain.resolve.fetch import fetch_dists

    assert lock.path is not None
    files = []
    if lock.closure is not None:
        fetched = fetch_dists(lock.closure.dists, lock.path.parent / DEPS_DIR, log)
        files = [(d.name, fetched[d.name], d.sha256) for d in lock.closure.dists]
    files += [(c.name, lock.wheel_path(c), c.wheel.sha256) for c in lock.components]
    return files


@record
class Staged:
    """The locked files ready beside the lock, and the hashed requirements file that names them."""
    requirements: Path
    steps: tuple[InstallStep, ...]


def stage(lock: Lock, target: Interpreter, log: Path) -> Staged:
    """Every locked file beside the lock (dependencies fetched into wheels/deps/, sha256 checked) and the
    hashed requirements file naming them as `target` sees them: wheels/deps/requirements.lock.txt. A container
    that gets the wheels by copy (exec mode) must be given them after this."""
    from toolchain.core.fs import atomic_write_text
    from toolchain.resolve.closure import DEPS_DIR
    from toolchain.resolve.fetch import hashed_requirements

    assert lock.path is not None
    files = closure_files(lock, log)
    reqs = lock.path.parent / DEPS_DIR / REQUIREMENTS_NAME
    reqs.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(reqs, hashed_requirements((target.runtime.visible_path(p), sha) for _, p, sha in files))
    return Staged(reqs, tuple(InstallStep(name, path, CLOSURE_ARGS) for name, path, _ in files))


def install_locked(lock: Lock, target: Interpreter, log: Path, progress: Progress | None = None, *,
                   staged: Staged | None = None) -> tuple[InstallStep, ...]:
    """`pip install --no-index --no-deps --require-hashes` of the staged files, then `pip check`: whatever
    the locked files need and the lock does not name is an error, never a download."""
    ready = staged or stage(lock, target, log)
    reqs, steps = ready.requirements, ready.steps
    if progress is not None:
        progress(InstallStep(f"{len(steps)} locked files", reqs, CLOSURE_ARGS))
    from toolchain.resolve.fetch import locked_pip_env

    target.run([target.python, "-m", "pip", "install", "--no-input", "--progress-bar", "off", "--isolated",
                *CLOSURE_ARGS, "-r", target.runtime.visible_path(reqs)], log=log, timeout=INSTALL_TIMEOUT,
               env=locked_pip_env(target.runtime.base_env(), read_config=False))
    done = target.run([target.python, "-m", "pip", "check"], log=log, capture=True, check=False, timeout=300)
    if done.returncode != 0:
        said = "\n".join("  " + line for line in (done.stdout + done.stderr).strip().splitlines())
        if lock.closure is None:
            raise UnlockedDependencies(
                f"{lock.path} records no resolved closure (built with --no-resolve, or by an older toolchain), and "
                f"its wheels need distributions it does not pin; nothing was downloaded in their place "
                f"({target.python}):\n{said}",
                hint=f"resolve and pin them: `toolchain lock --lock {lock.path}`; or, to take them unpinned from "
                     f"the index anyway, `toolchain smoke --allow-unlocked-deps` (the report marks the run unlocked)")
        raise TestFailed(f"the environment installed from the lock misses requirements the lock does not pin "
                         f"({target.python}); nothing was downloaded in their place:\n{said}",
                         hint="re-resolve the closure with `toolchain lock --lock LOCK --refresh`")
    return steps


# What toolchain/scripts/installed.py prints of each installed distribution, and what `environment` reports (report.json's
# install.environment).
Installed = TypedDict("Installed", {"name": str, "version": str, "sha256": str, "sha256-from": str})
LockedRow = TypedDict("LockedRow", {"name": str, "role": str, "locked": str, "locked-sha256": str,
                                    "installed": str | None, "installed-sha256": str | None, "sha256-from": str,
                                    "state": str})
OtherRow = TypedDict("OtherRow", {"name": str, "installed": str, "installed-sha256": str | None, "state": str})


class Environment(TypedDict):
    """The JSON report of an environment check: the locked distributions' state and those installed beside them."""
    resolved: bool  # the lock has a resolved closure
    ok: bool
    locked: list[LockedRow]
    other: list[OtherRow]  # installed, not in the lock


def environment(lock: Lock, target: Interpreter, log: Path | None = None) -> Environment:
    """The installed environment (pip freeze-like, with the sha256 of each file it was installed from: as pip
    recorded it, or, for an older pip that records none, of the local file its direct_url.json names) against
    the lock: every locked distribution with its state (ok, differs, missing), then what is installed besides."""
    done = target.run([target.python, "-I", target.script("installed.py")], capture=True, log=log, timeout=300)
    installed: dict[str, Installed] = {}
    found: list[Installed] = json.loads(done.stdout.strip().splitlines()[-1])
    for inst in found:  # sys.path order: the first one is the one imported
        installed.setdefault(str(canonicalize_name(inst["name"])), inst)
    locked: list[tuple[str, str, str, str]] = []  # (name, version, sha256, role)
    for c in lock.components:
        name, version = wheel_name_version(c.wheel.file)
        locked.append((name, version, c.wheel.sha256, "built"))
    for d in (lock.closure.dists if lock.closure is not None else ()):
        locked.append((d.name, d.version, d.sha256, "dependency"))
    rows: list[LockedRow] = []
    for name, version, sha, role in locked:
        have = installed.pop(name, None)
        if have is None:
            state = "missing"
        elif have["version"] != version or (have["sha256"] and have["sha256"] != sha):
            state = "differs"
        else:
            state = "ok"
        rows.append({"name": name, "role": role, "locked": version, "locked-sha256": sha,
                     "installed": have["version"] if have else None,
                     "installed-sha256": have["sha256"] if have else None,
                     "sha256-from": have["sha256-from"] if have else "", "state": state})
    extra: list[OtherRow] = [{"name": n, "installed": d["version"], "installed-sha256": d["sha256"] or None, "state": "not in lock"}
             for n, d in sorted(installed.items())]
    return {"resolved": lock.closure is not None, "ok": all(r["state"] == "ok" for r in rows),
            "locked": rows, "other": extra}


def require_environment(env: Environment, where: str, *, installed_here: bool = True) -> None:
    """Every locked distribution is there, in the locked version and file (a lock without a closure: its built
    wheels). `installed_here`: False for an existing environment (--no-install), said in the hint."""
    bad = [r for r in env["locked"] if r["state"] != "ok"]
    if bad:
        hint = ("install from the lock again (a fresh venv), or re-resolve with `toolchain lock --refresh`" if installed_here
                else "serve from an environment installed from this lock (drop --no-install), or make this one "
                     "match it (`pip install --no-deps --require-hashes` of the lock's files)")
        raise TestFailed(f"the environment {where} does not match the lock; nothing was served:\n" + "\n".join(
            f"  - {r['name']}: {r['state']} (installed {r['installed'] or 'nothing'}"
            f"{' sha256 ' + r['installed-sha256'] if r['state'] == 'differs' and r['installed-sha256'] else ''}, "
            f"the lock has {r['locked']} sha256 {r['locked-sha256']})" for r in bad), hint=hint)
