"""Sessions. Each one is a thin call of the `toolchain` command in the current environment: builds use the
interpreter (and torch XPU build) of the environment the recipe names, so nox must not hide it in a venv."""

from __future__ import annotations

import nox

nox.options.sessions = ["build-stack"]
nox.options.default_venv_backend = "none"


def _toolchain(session: nox.Session, command: str) -> None:
    session.run("python", "-m", "toolchain", command, *session.posargs, external=True)


@nox.session(name="build-stack", venv_backend="none")
def build_stack(session: nox.Session) -> None:
    """Build a recipe's wheels and lock: nox -s build-stack -- --recipe ark-latest (default: demo)."""
    _toolchain(session, "build")


@nox.session(venv_backend="none")
def smoke(session: nox.Session) -> None:
    """Smoke inference from a lock: nox -s smoke -- --lock dist/ark-latest/stack.lock.toml --device b70."""
    _toolchain(session, "smoke")


@nox.session(venv_backend="none")
def bisect(session: nox.Session) -> None:
    """Bisect a regression: nox -s bisect -- --recipe R --component C --good SHA --bad SHA --test smoke."""
    _toolchain(session, "bisect")


@nox.session(name="verify-repro", venv_backend="none")
def verify_repro(session: nox.Session) -> None:
    """Build twice (or against a lock) and compare every wheel: nox -s verify-repro -- --recipe demo."""
    _toolchain(session, "verify-repro")


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """The test suite in the current environment (tests/run.sh installs what it needs first)."""
    session.run("python", "-m", "pytest", *session.posargs, external=True)


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """Build benchmarks, measured side by side in one run (prints ratios); then the build-cost ones (P5
    compiler cache, P6 memory-sized jobs in podman) at their default sizes."""
    session.run("python", "-m", "benchmarks.bench_build", *session.posargs, external=True)
    session.run("python", "-m", "benchmarks.bench_remote", external=True)  # P7: the remote wheel cache
    session.run("python", "-m", "benchmarks.bench_cost", external=True)
    session.run("python", "-m", "benchmarks.bench_image", external=True)  # issue 42: from lock to image


@nox.session(name="bench-cost", venv_backend="none")
def bench_cost(session: nox.Session) -> None:
    """The build-cost benchmarks alone, sized by options: nox -s bench-cost -- --tus 8 --work 120 --no-p6."""
    session.run("python", "-m", "benchmarks.bench_cost", *session.posargs, external=True)


@nox.session(name="bench-bisect", venv_backend="none")
def bench_bisect(session: nox.Session) -> None:
    """Bisect benchmarks: builds per bisect and wall time against `git bisect run`; then compile seconds of a
    30-commit bisect with the compiler cache against without it and against `git bisect run`."""
    session.run("python", "-m", "benchmarks.bench_bisect", *session.posargs, external=True)
    session.run("python", "-m", "benchmarks.bench_ccache_bisect", external=True)


@nox.session(name="bench-ark", venv_backend="none")
def bench_ark(session: nox.Session) -> None:
    """The real ARK (from ../shared/mirrors): cold ark-cpu against a raw `pip wheel` of the same patched tree, the
    previous ARK change with the same cache, a bisect against `git bisect run` (`-- --reduced` leaves oneDNN out)."""
    session.run("python", "-m", "benchmarks.bench_ark", *session.posargs, external=True)


@nox.session(venv_backend="none")
def typecheck(session: nox.Session) -> None:
    """mypy over the package (configured in pyproject.toml)."""
    session.run("python", "-m", "mypy", *session.posargs, external=True)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff, and the import-linter contracts that keep the layers one way (pyproject.toml)."""
    session.run("python", "-m", "ruff", "check", "toolchain", "tests", "benchmarks", "noxfile.py", external=True)
    session.run("lint-imports", external=True)
