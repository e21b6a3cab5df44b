"""Shared fixtures for the spine tests: real git repositories, recipe workspaces with an isolated cache, the
demo built once per session. The helpers they use live in tests/spine_helpers.py (import them from there).
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.spine_helpers import PACKAGES, Cli, DemoBuild, GitRepo, Workspace, isolated_env
from tests.support.registry_fixtures import auth_registry, registry  # noqa: F401  (pytest fixtures)

# A git that runs the tests (a hook, `git rebase --exec`) exports where its repository is: every `git init` and
# commit of a test would then land in the checkout's own .git (seen once: core.bare set in a worktree's main
# repository). The tests' repositories are their own.
for _name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
              "GIT_PREFIX", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES"):
    os.environ.pop(_name, None)

# The stop signals the tests send, at their default disposition whatever the suite inherited: started from a
# background job (`nohup bash tests/run.sh &`, some CI runners) SIGINT and SIGHUP arrive ignored, and SIG_IGN
# passes through exec to every tool the tests start, which then never sees the signal a test sends. A handled
# signal is reset to its default in a child at exec; SIGINT keeps Python's own handler here (KeyboardInterrupt).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def default_stop_signals() -> list[signal.Signals]:
    """Reset each stop signal this process ignores (xdist's workers run it too); the ones it reset."""
    reset = []
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
            reset.append(sig)
    return reset


def pytest_configure(config: pytest.Config) -> None:
    default_stop_signals()


@pytest.fixture
def make_repo(tmp_path):
    """make_repo(name, package=None, subdir="", tag="v1.0.0") -> GitRepo under tmp_path/repos/."""
    def make(name: str, package: str | None = None, **kw) -> GitRepo:
        return GitRepo.create(tmp_path / "repos" / name, package, **kw)
    return make


@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory) -> GitRepo:
    """Shared, never modified after creation: tiny at v1.0.0 (HEAD~1) and one commit after it (HEAD)."""
    repo = GitRepo.create(tmp_path_factory.mktemp("shared-repos") / "tiny", "tiny")
    repo.commit("tiny: greet politely", {"tiny/__init__.py": (PACKAGES / "tiny/tiny/__init__.py").read_text()
                                         + "\n\ndef polite(name):\n    return 'good day ' + name\n"})
    return repo


@pytest.fixture
def ws(tmp_path) -> Workspace:
    return Workspace(tmp_path / "ws")


@pytest.fixture(scope="session")
def demo_build(tmp_path_factory) -> DemoBuild:
    """`toolchain build --recipe demo` into a fresh cache, once. Tests must not modify `cache` or `out`
    (copy them first)."""
    root = tmp_path_factory.mktemp("demo")
    cli = Cli(root, isolated_env(root))
    r = cli("build", "--recipe", "demo", "--cache-dir", root / "cache", "--out", root / "out", "--json")
    assert r.returncode == 0, str(r)
    return DemoBuild(root, root / "cache", root / "out", r, cli)


# ---- the realstack fixture (tests/support/realstack.py) ------------------------------------------------

@pytest.fixture(scope="session")
def realstack(tmp_path_factory):
    """Repositories, a base recipes dir with patches/, a user's override dir: see tests/support/realstack.py.
    Shared: tests must not modify its repositories or files."""
    from tests.support.realstack import make_realstack

    return make_realstack(tmp_path_factory.mktemp("realstack"))


@pytest.fixture(scope="session")
def realstack_built(realstack, tmp_path_factory):
    """The base stack recipe built once through the CLI into a fresh cache (see RealStackBuild)."""
    from tests.support.realstack import build_realstack

    return build_realstack(realstack, tmp_path_factory.mktemp("realstack-build"))
