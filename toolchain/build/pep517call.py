"""The recipe's default command (`pip wheel --no-build-isolation --no-deps SRC -w OUT`, run in SRC) as pip makes
its one build call, without pip: what runs INSIDE the target as a file (stdlib only, like intarget.py, which
runs it as the build's ARGV):

    python pep517call.py [--stored] OUT BACKEND BACKEND_PATH -- ARGV...

calls the PEP 517 backend's build_wheel in this interpreter (`--stored`: setuptools writes the wheel
uncompressed, as the tool normalizes it after); runs ARGV itself where pip would do more or
otherwise (`pip_settings`). The checks pip makes of the wheel it built are the tool's (toolchain.build.frontend).
"""

from __future__ import annotations  # the target's python3 may be 3.9: annotations stay unevaluated

import os
import sys
from typing import Any


def _read(path: str) -> str | None:
    # (intarget.py's own: each script runs in the target alone, neither can import the other)
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


PIP_IN_TREE = (21, 3)  # from pip 21.3 a directory is built where it is (before: copied to a temporary folder)
# pip settings (PIP_<NAME> variables, pip.conf keys) that cannot change what `pip wheel --no-build-isolation
# --no-deps DIR` builds: where an index is and how to reach it, pip's cache, its output. Any other one (such
# as config-settings, build-option, use-pep517, require-virtualenv, only-binary, python) and pip runs itself.
PIP_HARMLESS = frozenset((
    "index-url", "extra-index-url", "no-index", "find-links", "trusted-host", "cert", "client-cert", "proxy",
    "timeout", "default-timeout", "retries", "keyring-provider", "cache-dir", "no-cache-dir", "no-input",
    "disable-pip-version-check", "progress-bar", "quiet", "verbose", "no-color", "root-user-action",
    "break-system-packages", "no-warn-script-location", "no-build-isolation", "no-deps"))


def _pip_name(name: str) -> str:
    name = name.lower().replace("_", "-")
    return name[2:] if name.startswith("--") else name


def _pip_config_files(env: dict[str, str]) -> list[str]:
    """Every file pip (21.3 and later) may read its configuration from (more than it reads, never fewer)."""
    home = os.path.expanduser("~")
    chosen = env.get("PIP_CONFIG_FILE")
    files = [chosen] if chosen and chosen != os.devnull else []
    if chosen == os.devnull:  # pip reads no configuration file then
        return files
    dirs = (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep)
    files += [os.path.join(d, "pip", "pip.conf") for d in dirs if d] + ["/etc/pip.conf"]
    files += [os.path.join(home, ".pip", "pip.conf"),
              os.path.join(env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"), "pip", "pip.conf"),
              os.path.join(sys.prefix, "pip.conf")]
    return files


class PipSettings:
    """What pip would do besides the backend's build_wheel call, read from the environment and pip.conf files:
    `differs` says why it would do more or otherwise ("" when it would not); `constraints` are the lines of
    its constraints files, (canonical name, line, file): pip checks the project it builds against those that
    name it (`constraint_problem`)."""

    def __init__(self, differs: str = "", constraints: tuple[tuple[str, str, str], ...] = ()) -> None:
        self.differs, self.constraints = differs, constraints


def _canonical(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _constraint_lines(path: str, seen: set[str]) -> list[tuple[str, str, str]] | None:
    """The lines of a pip constraints file, following its -r/-c lines, as (canonical name, line, file); None
    when pip would read more into it than named versions (a URL or path, extras, an option line) or it cannot
    be read."""
    import re

    path = os.path.abspath(path)
    if path in seen:
        return []
    seen.add(path)
    text = _read(path)
    if text is None:
        return None
    lines: list[tuple[str, str, str]] = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if not line:
            continue
        nested = re.match(r"^(?:-[rc]\s*|--(?:requirement|constraint)(?:\s+|=))(\S+)$", line)
        if nested:
            more = _constraint_lines(os.path.join(os.path.dirname(path), nested.group(1)), seen)
            if more is None:
                return None
            lines += more
            continue
        named = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:[<>=!~;(]|$)", line)
        if named is None:
            return None
        lines.append((_canonical(named.group(1)), line, path))
    return lines


def pip_settings(env: dict[str, str]) -> PipSettings:
    """Whether `pip wheel --no-build-isolation --no-deps DIR` would do more here than call the backend's
    build_wheel in DIR: no pip, a pip older than 21.3 (it builds a copy elsewhere), or a pip setting of the
    environment or a pip.conf that pip passes on or acts on (constraints aside: `PipSettings.constraints`)."""
    import configparser
    import re

    # found on sys.path by hand: asking the import system for pip makes setuptools' distutils shim stand aside
    # in this process (_distutils_hack's spec_for_pip), and setuptools then fails to import
    pip = next((os.path.join(d or ".", "pip") for d in sys.path
                if os.path.isfile(os.path.join(d or ".", "pip", "__init__.py"))), "")
    text = _read(os.path.join(pip, "__init__.py")) if pip else None
    found = re.search(r"^__version__\s*=\s*['\"](\d+)\.(\d+)", text or "", re.M)
    if found is None:
        return PipSettings("no pip (or no version of it) found")
    if (int(found.group(1)), int(found.group(2))) < PIP_IN_TREE:
        return PipSettings(f"pip {found.group(1)}.{found.group(2)} builds a copy of the tree, not the tree")
    files: list[str] = []
    for key in sorted(env):
        name = _pip_name(key[4:])
        if not key.startswith("PIP_") or name in PIP_HARMLESS or name == "config-file":
            continue
        if name != "constraint":
            return PipSettings(f"{key} is set")
        files += env[key].split()
    for path in _pip_config_files(env):
        if not os.path.isfile(path):
            continue
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, OSError, UnicodeDecodeError) as exc:
            return PipSettings(f"{path} cannot be read ({exc.__class__.__name__})")
        for section in ("global", "wheel"):
            for name in parser.options(section) if parser.has_section(section) else ():
                if _pip_name(name) == "constraint":
                    files += parser.get(section, name).split()
                elif _pip_name(name) not in PIP_HARMLESS:
                    return PipSettings(f"{path} sets {name} in [{section}]")
    constraints: list[tuple[str, str, str]] = []
    for path in files:
        lines = _constraint_lines(path, set())
        if lines is None:
            return PipSettings(f"the constraints file {path} holds more than named versions, or cannot be read")
        constraints += lines
    if constraints and not os.path.isfile(os.path.join(pip, "_vendor", "packaging", "requirements.py")):
        return PipSettings("pip has constraints, and its packaging library is not where pip keeps it")
    return PipSettings(constraints=tuple(constraints))


def constraint_problem(constraints: tuple[tuple[str, str, str], ...], wheel: str) -> str:
    """Why pip's constraints refuse the project `wheel` (a wheel file's name) is a build of, as pip checks a
    directory it builds against them ("" when they do not): a constraint naming it (its markers true here)
    that its version does not satisfy, or that pins a URL."""
    name, version = wheel.split("-")[:2]
    mine = [(line, path) for n, line, path in constraints if n == _canonical(name)]
    if not mine:
        return ""
    from pip._vendor.packaging.requirements import (  # (pip present: pip_settings; the build is over)
        InvalidRequirement,
        Requirement,
    )

    for line, path in mine:
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            return f"Invalid requirement: {line!r} ({path}): {exc}"
        if req.marker is not None and not req.marker.evaluate():
            continue
        if req.url or not req.specifier.contains(version, prereleases=True):
            return (f"Cannot build {name}=={version}: the constraint {line!r} in {path} excludes it "
                    "(pip wheel refuses it so)")
    return ""


def _stored_by_default() -> None:
    """setuptools' bdist_wheel writes the wheel uncompressed unless the project says otherwise (its
    `compression` option, from setup.cfg or the command line, still wins): the tool normalizes every wheel it
    builds (build/wheelnorm.py), which writes each entry compressed again, an unchanged file of a bisect's
    next commit from what it kept; the backend compressing every file was work thrown away (~0.09 s of
    auto-round's ~0.45 s build). Another backend, or a setuptools without its own bdist_wheel: as it is."""
    if "setuptools" not in sys.modules:
        return
    try:
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:
        return
    initialize = bdist_wheel.initialize_options

    def initialize_options(self: Any) -> None:
        initialize(self)
        self.compression = "stored"

    bdist_wheel.initialize_options = initialize_options


def pep517(out: str, backend: str, backend_path: str, argv: list[str], *, stored: bool = False) -> int:
    """What `pip wheel --no-build-isolation --no-deps SRC -w OUT` (`argv`, run in SRC) does to build, without
    pip's own start (its imports, a metadata call in one more interpreter): pyproject-hooks' build_wheel call,
    as pip makes it, in this interpreter. `backend_path`: the absolute `backend-path` folders (os.pathsep
    between). `stored`: the tool normalizes the wheel (compressing it), so setuptools writes it uncompressed
    (`_stored_by_default`). Where pip would do more or otherwise (`pip_settings`), `argv` runs instead. A wheel that pip's
    constraints refuse is removed and the build fails, as under pip. The checks pip makes of the wheel it
    built are the tool's (toolchain.build.frontend)."""
    settings = pip_settings(dict(os.environ))
    if settings.differs:
        print(f"# toolchain: running the command as written, pip itself: {settings.differs}", flush=True)
        os.execvp(argv[0], argv)
    print(f"# toolchain: the command as pip runs it: the PEP 517 backend {backend}'s build_wheel called in "
          f"{os.getcwd()} (pip's build call; without pip's own start)", flush=True)
    from importlib import import_module

    del sys.path[0]  # this script's folder: pip's hook runs from a folder of its own
    os.environ["PEP517_BUILD_BACKEND"] = backend  # as pyproject-hooks sets them for the backend
    paths = backend_path.split(os.pathsep) if backend_path else []
    if paths:
        os.environ["PEP517_BACKEND_PATH"] = backend_path
        sys.path[:0] = paths
    module, _, attrs = backend.partition(":")
    hooks: Any = import_module(module)
    where = os.path.normcase(os.path.abspath(getattr(hooks, "__file__", None) or ""))
    if paths and not any(os.path.commonprefix([where, folder]) == folder  # noqa: RUF071 (pyproject-hooks' test)
                         for folder in (os.path.normcase(os.path.abspath(p)) for p in paths)):
        sys.stderr.write(f"the build backend {backend} was not loaded from backend-path ({backend_path})\n")
        return 1
    for attr in filter(None, attrs.split(".")):
        hooks = getattr(hooks, attr)
    if stored:
        _stored_by_default()
    built = str(hooks.build_wheel(os.path.abspath(out), None, None))
    problem = constraint_problem(settings.constraints, built)
    if problem:
        os.unlink(os.path.join(out, built))
        sys.stderr.write(f"ERROR: {problem}\n")
        return 1
    print(f"# toolchain: the backend built {built}", flush=True)
    return 0


def main(args: list[str]) -> int:
    """`[--stored] OUT BACKEND BACKEND_PATH -- ARGV...`: the backend's build call (or ARGV); its exit code."""
    stored = args[:1] == ["--stored"]
    args = args[1:] if stored else args
    if len(args) >= 5 and args[3] == "--":
        return pep517(args[0], args[1], args[2], args[4:], stored=stored)
    sys.stderr.write("usage: [--stored] OUT BACKEND BACKEND_PATH -- ARGV...\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
