#!/usr/bin/env bash
# The test command (README, .ci/run): installs everything the tests need, then runs them.
#   1. pip: this package with its test extras, plus setuptools and wheel (builds use --no-build-isolation)
#   2. apt + podman + docker: podman, runc, debootstrap, docker.io, diffoscope-minimal, docker-registry,
#      apache2-utils, redis-server; the podman settings, the Debian test image (cached), a docker daemon of our own on
#      /run/toolchain-docker.sock with the same image loaded (tests/support/ci_setup.sh)
#   3. the real vLLM-on-CPU server environment for the smoke tests (cached across runs on this machine)
#   4. pytest
# Extra arguments go to pytest. TOOLCHAIN_SKIP_VLLM=1 skips step 3 (the vllm tests then skip, saying why).
# The interpreter: the virtualenv the user activated ($VIRTUAL_ENV/bin/python), else python3 (the system
# interpreter, where pip may install into it); PYTHON=/path/to/python overrides both.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
say() { printf '\n[tests/run.sh] %s\n' "$*" >&2; }
if [[ -z "${PYTHON:-}" && -n "${VIRTUAL_ENV:-}" ]]; then
    if [[ ! -x "$VIRTUAL_ENV/bin/python" ]]; then
        echo "VIRTUAL_ENV=$VIRTUAL_ENV has no bin/python: activate a virtualenv that exists, or deactivate" >&2
        exit 2
    fi
    PYTHON="$VIRTUAL_ENV/bin/python"
    PATH="$VIRTUAL_ENV/bin:$PATH"  # nox's sessions and lint-imports are found on PATH: the venv's
fi
PYTHON="${PYTHON:-python3}"
export PYTHON PATH  # tests/support/ci_setup.sh runs its helpers with it
say "interpreter: $("$PYTHON" -c 'import sys; print(sys.executable, "(a virtualenv)" if sys.prefix != sys.base_prefix else "")')"

say "installing the package and test dependencies"
if ! "$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[test]" setuptools wheel; then
    echo "pip could not install into $PYTHON. Where the system Python is externally managed (PEP 668), make and" \
         "activate a virtualenv first: python3 -m venv .venv && . .venv/bin/activate (README, Set-up)" >&2
    exit 1
fi

say "podman, docker, debootstrap, diffoscope, docker-registry, redis-server and the test image"
bash tests/support/ci_setup.sh
if [[ -f /etc/containers/toolchain-tests.conf ]]; then
    export CONTAINERS_CONF=/etc/containers/toolchain-tests.conf
fi
if [[ -S /run/toolchain-docker.sock ]]; then  # the daemon ci_setup.sh started (or found) for the tests
    export DOCKER_HOST=unix:///run/toolchain-docker.sock
fi
if [[ "$(id -u)" == 0 && "${TOOLCHAIN_SKIP_IMAGE:-}" != 1 ]]; then
    # ci_setup.sh made both engines work (or failed): a container test may not skip for want of one
    export TOOLCHAIN_REQUIRE_CONTAINERS="${TOOLCHAIN_REQUIRE_CONTAINERS-podman,docker}"
fi

if [[ "${TOOLCHAIN_SKIP_VLLM:-0}" != 1 ]]; then
    say "vLLM CPU server environment for the smoke tests"
    "$PYTHON" tests/support/vllm_cpu.py setup
fi

say "the house checks: mypy over the package, ruff, the import-linter layer contracts"
"$PYTHON" -m nox -s typecheck lint

say "running the tests"
set +e
# TOOLCHAIN_TEST_WORKERS: pytest-xdist worker processes (default 2; 0 runs in this process, one test at a time).
# Each test file runs whole on one worker (--dist loadfile): its module fixtures are made once. pytest-benchmark,
# where installed, refuses to measure under xdist with a warning that filterwarnings=error turns into an error.
"$PYTHON" -m pytest -p no:cacheprovider -p no:benchmark -ra --durations=30 \
    -n "${TOOLCHAIN_TEST_WORKERS:-2}" --dist loadfile "$@"
rc=$?
set -e
if [[ $rc == 5 ]]; then
    echo "pytest collected no tests: that is a failure here" >&2
    exit 1
fi
exit $rc
