"""The recipe's default build command, `pip wheel --no-build-isolation --no-deps {src} -w {out}`, run as the
one call to the build backend that pip makes, without pip.

Of the ~1.8 s `pip wheel` takes on a small pure-Python project, the backend's build_wheel is ~0.6 s: the rest
is pip starting (its imports, its configuration), a metadata call in one more interpreter, and a copy. The
wheel comes from build_wheel either way, so where pip would make exactly that call (a source tree whose
pyproject.toml has a [build-system] table, or has none, which pip builds through PEP 517 all the same, by
setuptools.build_meta:__legacy__; pip 21.3 or later in the
target, which builds the tree where it is; no pip setting that it passes on), a script in the target
(build/pep517call.py, the in-target runner's build command) makes the call itself, as pyproject-hooks makes it for pip: the same
interpreter, the same folder, the same backend and backend-path, the same PEP517_* variables, no config
settings (but for setuptools' bdist_wheel writing the wheel uncompressed where the tool normalizes it after,
which compresses every entry again: the same bytes once normalized). Anywhere else, and for any other
command, the command runs as written. The checks pip makes of the wheel it built (`check_as_pip`) are made here: a project whose Requires-Python excludes the target's
Python, or whose wheel's name or version disagrees with its metadata, fails as under pip.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from pathlib import Path

from toolchain.core import toml as tomlio
from toolchain.core.record import record
from toolchain.errors import BuildError
from toolchain.recipe.model import DEFAULT_COMMAND

PEP517 = "pep517-call"  # the Extra name of the call's in-target script
PEP517_FILE = Path(__file__).with_name("pep517call.py")
LEGACY_BACKEND = "setuptools.build_meta:__legacy__"  # pip's backend where pyproject.toml names none (or has no table)


@record
class BackendCall:
    """The build backend pip would call for a source tree: `backend` ("module:object"), and its
    `backend-path` folders relative to the tree."""
    backend: str
    backend_path: tuple[str, ...] = ()

    def argv(self, python: str, script: str, src: str, out: str, command: Sequence[str], *,
             stored: bool = False) -> list[str]:
        """The argv of the call's script (`PEP517_FILE` at `script` in the target; run in `src`, the tree's
        target-side path) that makes the call, or runs `command` where pip would do more. `stored`: the wheel
        is normalized after (compressed then), so setuptools writes it uncompressed."""
        paths = [posixpath.normpath(posixpath.join(src, p)) for p in self.backend_path]
        return [python, script, *(["--stored"] if stored else []), out, self.backend, ":".join(paths), "--",
                *command]  # (Linux targets)

    def describe(self) -> str:
        """How the wheel was built, for a log: the PEP 517 backend called directly."""
        return f"the PEP 517 backend {self.backend} called directly, as pip would call it"


def backend_call(command: Sequence[str], tree: Path) -> BackendCall | None:
    """The call pip would make to build `tree` (its host-side path) with `command`; None when `command` is not
    the default one, or pip would do otherwise or fail: no pyproject.toml (a setup.py build, by pip's version),
    a table pip refuses (no `requires` list of strings, a build-backend
    that is not a string, a backend-path outside the tree), or a file that does not parse."""
    if tuple(command) != DEFAULT_COMMAND:
        return None
    try:
        system = tomlio.load_file(Path(tree) / "pyproject.toml").get("build-system")
    except (OSError, UnicodeDecodeError, tomlio.TOMLDecodeError):
        return None
    if system is None:  # pip's choice for a pyproject.toml without the table (pip's pyproject.py)
        return BackendCall(LEGACY_BACKEND)
    if not isinstance(system, dict):
        return None
    requires, backend, paths = system.get("requires"), system.get("build-backend", LEGACY_BACKEND), \
        system.get("backend-path", [])
    if not (isinstance(requires, list) and all(isinstance(r, str) for r in requires)) or \
            not isinstance(backend, str) or not backend.strip() or \
            not (isinstance(paths, list) and all(isinstance(p, str) and _inside(p) for p in paths)):
        return None
    return BackendCall(backend, tuple(paths))


def _inside(path: str) -> bool:
    """A relative path that stays inside its tree (pyproject-hooks refuses others)."""
    norm = posixpath.normpath(path)
    return bool(path) and not posixpath.isabs(path) and norm != ".." and not norm.startswith("../")


def check_as_pip(wheel: Path, python_version: str, what: str, log: Path) -> None:
    """The checks `pip wheel` makes of a project and the wheel it built: its Requires-Python admits the
    target's Python (pip asks before building; an unreadable Requires-Python is ignored, as pip ignores it),
    the wheel's name and version are its metadata's, and metadata 1.2 or later has a PEP 440 version."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.utils import canonicalize_name, canonicalize_version, parse_wheel_filename
    from packaging.version import InvalidVersion, Version

    from toolchain.build.wheelmeta import wheel_meta

    meta = wheel_meta(wheel)
    name, version = parse_wheel_filename(wheel.name)[:2]
    problem = ""
    try:
        admits = SpecifierSet(meta.requires_python).contains(Version(python_version), prereleases=True) \
            if meta.requires_python and python_version else True
    except (InvalidSpecifier, InvalidVersion):
        admits = True
    if not admits:
        problem = (f"Package {meta.name!r} requires a different Python: {python_version} not in "
                   f"{meta.requires_python!r}")
    elif canonicalize_name(meta.name) != name:
        problem = f"Wheel has unexpected file name: expected {canonicalize_name(meta.name)!r}, got {name!r}"
    elif canonicalize_version(meta.version) != canonicalize_version(version):
        problem = f"Wheel has unexpected file name: expected {meta.version!r}, got {str(version)!r}"
    elif not meta.metadata_version:
        problem = "Missing Metadata-Version"
    else:
        try:
            newer = Version(meta.metadata_version) >= Version("1.2")
        except InvalidVersion:
            newer, problem = False, f"Invalid Metadata-Version: {meta.metadata_version}"
        if not problem and newer:
            try:
                Version(meta.version)
            except InvalidVersion:
                problem = f"Metadata 1.2 mandates PEP 440 version, but {meta.version!r} is not"
    if problem:
        raise BuildError(f"building {what} failed: {problem} (pip wheel refuses it so; the build was made as "
                         f"pip makes it)\n  log: {log}",
                         hint="the commit's packaging does not fit the target: fix the project's metadata, or "
                              "build for a Python it admits ([target] python)")


__all__ = ["BackendCall", "backend_call", "check_as_pip"]
