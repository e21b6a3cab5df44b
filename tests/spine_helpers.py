"""Helpers for the spine tests (used by tests/conftest.py and the test modules): real git repositories,
recipe workspaces, the CLI as a real process.

Import them as `from tests.spine_helpers import ...` (tests/ is a package: one module name per file, which
mypy follows), not from a conftest. Everything is real: `git` makes the repositories,
`python -m toolchain` runs in a subprocess with an isolated cache, and builds run `pip wheel`. The fixture
projects in tests/packages/ use a tiny in-tree PEP 517 backend (tests/packages/_shared/tiny_backend.py),
so one build takes about a second.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit

REPO_ROOT = Path(__file__).resolve().parent.parent


def shipped_demo_commit(component: str) -> str:
    """The commit the shipped demo recipe pins for `component` (read from it, so a test never restates it)."""
    demo = tomllib.loads((REPO_ROOT / "toolchain" / "shipped" / "recipes" / "demo.toml").read_text(encoding="utf-8"))
    return str(demo["components"][component]["commit"])
PACKAGES = Path(__file__).resolve().parent / "packages"
BACKEND = PACKAGES / "_shared" / "tiny_backend.py"
STANDIN = REPO_ROOT / "toolchain" / "demo_src" / "oneapi-standin"
STANDIN_SETVARS = STANDIN / "setvars.sh"
CLI_TIMEOUT = 300
GIT_EPOCH = 1767268800  # fixed dates: commit ids do not depend on when the tests run
TINY_INIT = (PACKAGES / "tiny" / "tiny" / "__init__.py").read_text()


# ---- git repositories --------------------------------------------------------------------------------

class GitRepo:
    """A real (non-bare) git repository with helpers to commit, tag, branch, merge and make patches."""

    _clock = 0

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, path: Path, package: str | None = None, *, subdir: str = "", tag: str | None = "v1.0.0",
               message: str = "initial import") -> GitRepo:
        path.mkdir(parents=True)
        repo = cls(path)
        repo.git("init", "--quiet", "--initial-branch=main")
        if package:
            repo.add_package(package, subdir)
        else:
            repo.write({"README": "empty\n"})
        repo.commit(message, tag=tag)
        return repo

    @property
    def url(self) -> str:
        return self.path.as_uri()

    def git(self, *args: str) -> str:
        GitRepo._clock += 1
        when = f"@{GIT_EPOCH + 60 * GitRepo._clock} +0000"
        env = dict(os.environ, GIT_AUTHOR_NAME="Test Author", GIT_AUTHOR_EMAIL="test@example.invalid",
                   GIT_COMMITTER_NAME="Test Author", GIT_COMMITTER_EMAIL="test@example.invalid",
                   GIT_AUTHOR_DATE=when, GIT_COMMITTER_DATE=when, GIT_CONFIG_NOSYSTEM="1")
        r = subprocess.run(["git", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", *args],
                           cwd=self.path, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"git {' '.join(args)} failed:\n{r.stdout}{r.stderr}"
        return r.stdout

    def write(self, files: dict[str, str]) -> None:
        for rel, text in files.items():
            target = self.path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)

    def add_package(self, package: str, subdir: str = "") -> None:
        """Copy tests/packages/<package> into the work tree (at `subdir`), the tiny backend beside each
        pyproject.toml."""
        dest = self.path / subdir if subdir else self.path
        shutil.copytree(PACKAGES / package, dest, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
        for pyproject in dest.rglob("pyproject.toml"):
            shutil.copyfile(BACKEND, pyproject.parent / BACKEND.name)

    def commit(self, message: str, files: dict[str, str] | None = None, *, tag: str | None = None) -> str:
        if files:
            self.write(files)
        self.git("add", "-A")
        self.git("commit", "--quiet", "--allow-empty", "-m", message)
        if tag:
            self.git("tag", tag)
        return self.head()

    def head(self, rev: str = "HEAD") -> str:
        return self.git("rev-parse", rev).strip()

    def branch(self, name: str, start: str = "HEAD") -> None:
        self.git("branch", name, start)

    def switch(self, name: str) -> None:
        self.git("checkout", "--quiet", name)

    def merge(self, branch: str, message: str) -> str:
        self.git("merge", "--no-ff", "--quiet", "-m", message, branch)
        return self.head()

    def make_patch(self, files: dict[str, str], subject: str = "a local patch") -> str:
        """The change `files` would make to HEAD, as `git format-patch` text; the tree is left as it was."""
        start = self.head()
        self.commit(subject, files)
        text = self.git("format-patch", "-1", "--stdout", "HEAD")
        self.git("reset", "--quiet", "--hard", start)
        return text

    def read(self, rel: str, rev: str = "HEAD") -> str:
        return self.git("show", f"{rev}:{rel}")


# ---- the CLI as a process ----------------------------------------------------------------------------

@dataclass
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        try:
            return json.loads(self.stdout)
        except ValueError:
            raise AssertionError(f"stdout is not one JSON document:\n{self}") from None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def __str__(self) -> str:
        return (f"$ {' '.join(self.argv)}\nexit {self.returncode}\n--- stdout\n{self.stdout}"
                f"\n--- stderr\n{self.stderr}")


def isolated_env(root: Path) -> dict[str, str]:
    """os.environ without toolchain/oneAPI/test knobs, with the cache (and XDG cache) under `root`."""
    drop = ("TOOLCHAIN_", "TINY_", "SETVARS_", "CMPLR_ROOT", "ONEAPI_ROOT")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(TOOLCHAIN_CACHE_DIR=str(root / "cache"), XDG_CACHE_HOME=str(root / "xdg-cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
               PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONDONTWRITEBYTECODE="1")
    return env


class Cli:
    """Runs `python -m toolchain ARGS` in `cwd` with an isolated environment."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd = cwd
        self.env = env

    def argv(self, args: Iterable[object]) -> list[str]:
        return [sys.executable, "-m", "toolchain", *map(str, args)]

    def __call__(self, *args: object, env: dict[str, str] | None = None, timeout: float = CLI_TIMEOUT) -> Result:
        argv = self.argv(args)
        r = subprocess.run(argv, cwd=self.cwd, env={**self.env, **(env or {})}, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        return Result(argv, r.returncode, r.stdout, r.stderr)

    def ok(self, *args: object, **kw: Any) -> Result:
        r = self(*args, **kw)
        assert r.returncode == 0, str(r)
        return r

    def start(self, *args: object, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Started in its own process group (so a test can kill the whole build with killpg)."""
        return subprocess.Popen(self.argv(args), cwd=self.cwd, env={**self.env, **(env or {})},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True)

    def finish(self, proc: subprocess.Popen[str], timeout: float = CLI_TIMEOUT) -> Result:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise
        assert isinstance(proc.args, list), proc.args  # start() passes an argv list
        return Result(proc.args, proc.returncode, out, err)


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def live_in_group(pgid: int) -> list[str]:
    """The processes of process group `pgid` that still run ("pid command line"), read from /proc. A zombie
    (dead, not yet reaped) holds no port, file or device and is not counted."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            fields = text[text.rindex(")") + 2:].split()
            if int(fields[2]) != pgid or fields[0] in ("Z", "X"):
                continue
            cmdline = Path(stat.parent, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        live.append(f"{stat.parent.name} {cmdline.strip()}")
    return live


def interrupt(proc: subprocess.Popen, sig: int, timeout: float = 120) -> Result:
    """Send `sig` the way it reaches the tool in real life: SIGINT to its whole process group (Ctrl-C at a
    terminal), SIGTERM or SIGHUP to the tool alone (a CI cancel, `timeout`, a closed terminal). Wait for it
    to end; nothing of its process group may be left running."""
    try:
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        out, err = proc.communicate(timeout=timeout)
        left = live_in_group(proc.pid)
    finally:
        kill_group(proc)
    assert left == [], left
    return Result(list(map(str, proc.args)), proc.returncode, out, err)  # type: ignore[arg-type]


def assert_interrupted(r: Result, sig: int, code: int) -> None:
    """The documented exit code of a stop signal and the `--json` error document, no traceback."""
    assert r.returncode == code, str(r)
    assert r.json() == {"ok": False, "exit_code": code, "kind": "Interrupted", "hint": None,
                        "error": f"interrupted by {signal.Signals(sig).name}"
                                 + (" (Ctrl-C)" if sig == signal.SIGINT else "")}
    assert "Traceback" not in r.stderr, str(r)


def wait_for_text(path: Path, text: str = "", count: int = 1, *, proc: subprocess.Popen | None = None,
                  timeout: float = 120) -> str:
    """Wait until `path` holds `text` `count` times (text "": until it is not empty) and return its content;
    fail at once if `proc` (the process expected to write it) ends first."""
    deadline = time.monotonic() + timeout
    while True:
        content = path.read_text(errors="replace") if path.is_file() else ""
        if (content.count(text) >= count) if text else content.strip():
            return content
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the process ended before {path} held {text!r} x{count}:\n{out}{err}")
        assert time.monotonic() < deadline, f"{text!r} never appeared {count} time(s) in {path}"
        time.sleep(0.05)


# ---- recipe workspaces -------------------------------------------------------------------------------

class Workspace:
    """A directory with recipes/ and patches/ (the layout the tool expects) and a CLI running in it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.recipes = root / "recipes"
        self.patches = root / "patches"
        self.cache = root / "cache"
        self.recipes.mkdir(parents=True)
        self.patches.mkdir()
        self.env = isolated_env(root)
        self.cli = Cli(root, self.env)

    def recipe(self, name: str, content: str | dict) -> Path:
        path = self.recipes / f"{name}.toml"
        path.write_text(content if isinstance(content, str) else tomlkit.dumps(content))
        return path

    def patch(self, rel: str, text: str) -> Path:
        path = self.patches / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def build(self, recipe: str, out: str = "out", *extra: object, env: dict[str, str] | None = None,
              cache: Path | None = None) -> Result:
        return self.cli("build", "--recipe", recipe, "--out", self.root / out,
                        "--cache-dir", cache or self.cache, "--json", *extra, env=env)

    def lock(self, out: str = "out") -> dict:
        return tomlkit.parse((self.root / out / "stack.lock.toml").read_text()).unwrap()

    def record(self, out: str = "out") -> dict:
        """The build record beside the lock: what the build measured, where this machine keeps things."""
        return tomlkit.parse((self.root / out / "build-record.toml").read_text()).unwrap()

    def snapshot(self) -> dict[str, bytes]:
        """Every file (and directory) under the workspace, for "nothing was written" checks."""
        return {str(p.relative_to(self.root)): (p.read_bytes() if p.is_file() else b"<dir>")
                for p in sorted(self.root.rglob("*"))}


def component(repo: GitRepo, commit: str | None = None, **keys: object) -> dict:
    """A [components.X] table building `repo` at `commit` (default: HEAD)."""
    return {"url": repo.url, "ref": "main", "commit": commit or repo.head(), **keys}


def counted(counter: Path) -> int:
    """How many builds the tiny backend counted (TINY_BUILD_COUNTER: a line per build_wheel call)."""
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def recipe_data(components: dict[str, dict], *, setvars: str = "", **top: object) -> dict:
    """A recipe table: host target with this interpreter, no toolchain unless `setvars` is given."""
    data: dict = {"description": "test recipe", "toolchain": {"setvars": setvars},
                  "target": {"runtime": "host", "python": sys.executable}}
    if setvars:
        data["toolchain"]["setvars-args"] = ["--force"]
    data.update(top)
    data["components"] = components
    return data


# ---- the demo, built once per session ----------------------------------------------------------------

@dataclass
class DemoBuild:
    root: Path
    cache: Path
    out: Path
    result: Result
    cli: Cli

    @property
    def lock_path(self) -> Path:
        return self.out / "stack.lock.toml"

    def lock(self) -> dict:
        return tomlkit.parse(self.lock_path.read_text()).unwrap()


def _deep(lock: object, record: object) -> object:
    if isinstance(lock, dict) and isinstance(record, dict):
        return {**lock, **{k: _deep(lock.get(k), v) for k, v in record.items()}}
    if isinstance(lock, list) and isinstance(record, list) and len(lock) == len(record):
        return [_deep(a, b) for a, b in zip(lock, record, strict=True)]
    return record


def lock_and_record(out: Path) -> dict:
    """`<out>/stack.lock.toml` with its build record (`build-record.toml`: what the build measured, this
    machine's paths) laid over it, key by key, as `read_lock` reads them back."""
    lock = tomlkit.parse((out / "stack.lock.toml").read_text()).unwrap()
    record = tomlkit.parse((out / "build-record.toml").read_text()).unwrap()
    merged = _deep(lock, {k: v for k, v in record.items() if k not in ("lock-sha256", "resolve")})
    assert isinstance(merged, dict)
    return merged


def wheel_member(out: Path, member: str, wheel_glob: str = "*.whl") -> str:
    """A file inside the one wheel matching `wheel_glob` in `<out>/wheels/`."""
    (wheel,) = (out / "wheels").glob(wheel_glob)
    with zipfile.ZipFile(wheel) as z:
        return z.read(member).decode()
