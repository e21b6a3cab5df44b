#!/usr/bin/env bash
# Prepare this machine for the container tests (idempotent; reruns take seconds).
#
#   1. apt-get install podman runc debootstrap   (skipped when dpkg says all are installed)
#   2. write the podman config to $CONF (only when its content changed)
#   3. build the Debian bookworm test image, cached by content hash
#      (tests/support/test_image.py build; skipped when the image exists)
#
# Afterwards run the tests with:   export CONTAINERS_CONF=/etc/containers/toolchain-tests.conf
# (tests/support/container_fixtures.py also sets it by itself when the file exists).
#
# Not root: prints why and exits 0 without touching anything; the container tests then skip.
# As root, a failing step fails this script (so CI does not quietly skip the container tests).
# Environment: PYTHON (default python3), TOOLCHAIN_TEST_MIRROR (Debian mirror override),
#              TOOLCHAIN_SKIP_IMAGE=1 (set up podman but build no image).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONF=/etc/containers/toolchain-tests.conf
PACKAGES=(podman runc debootstrap)
PYTHON="${PYTHON:-python3}"

log() { printf '[ci_setup] %s\n' "$*" >&2; }
now() { date +%s; }
t_start=$(now)

if [[ "$(id -u)" != 0 ]]; then
    log "not running as root (uid $(id -u)): skipping podman/debootstrap setup;"
    log "container tests will skip (podman as root and debootstrap are needed to build the test image)."
    exit 0
fi

# 1. packages -----------------------------------------------------------------------------
missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg -s "$pkg" 2>/dev/null | grep -q '^Status: install ok installed'; then
        missing+=("$pkg")
    fi
done
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    t0=$(now)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq -o Dpkg::Use-Pty=0 "${PACKAGES[@]}" >/dev/null
    log "apt done in $(($(now) - t0))s"
else
    log "packages already installed: ${PACKAGES[*]}"
fi

# 2. podman config ------------------------------------------------------------------------
desired='# Written by tests/support/ci_setup.sh for the toolchain container tests.
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"'
mkdir -p "$(dirname "$CONF")"
if [[ -f "$CONF" && "$(cat "$CONF")" == "$desired" ]]; then
    log "$CONF is up to date"
else
    tmp="$(mktemp "$CONF.XXXXXX")"
    printf '%s\n' "$desired" >"$tmp"
    chmod 0644 "$tmp"
    mv -f "$tmp" "$CONF"
    log "wrote $CONF"
fi
export CONTAINERS_CONF="$CONF"

if ! info_err="$(podman info --format '{{.Host.OCIRuntime.Name}}' 2>&1 >/dev/null)"; then
    log "podman does not work with CONTAINERS_CONF=$CONF:"
    printf '%s\n' "$info_err" >&2
    exit 1
fi

# 3. test image ---------------------------------------------------------------------------
if [[ "${TOOLCHAIN_SKIP_IMAGE:-}" == 1 ]]; then
    log "TOOLCHAIN_SKIP_IMAGE=1: not building the test image"
else
    t0=$(now)
    image="$("$PYTHON" "$HERE/test_image.py" build --engine podman)"
    log "test image: $image (ready in $(($(now) - t0))s)"
fi

log "done in $(($(now) - t_start))s. For the tests:"
echo "export CONTAINERS_CONF=$CONF"
