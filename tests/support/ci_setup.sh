#!/usr/bin/env bash
# Prepare this machine for the container tests (idempotent; reruns take seconds).
#
#   1. apt-get install podman runc debootstrap, and (without recommends) docker.io diffoscope-minimal
#      docker-registry apache2-utils redis-server strace   (skipped when dpkg says all are installed)
#   2. write the podman config to $CONF (only when its content changed)
#   3. build the Debian bookworm test image, cached by content hash
#      (tests/support/debian_image.py build; skipped when the image exists)
#   4. start a docker daemon of our own on $DOCKER_SOCK unless an engine answers there
#      (data in /var/lib/toolchain-docker, runtime state in /run/toolchain-docker), and load the test
#      image into it (podman save + docker load; skipped when docker has the image)
#
# Afterwards run the tests with:
#   export CONTAINERS_CONF=/etc/containers/toolchain-tests.conf DOCKER_HOST=unix:///run/toolchain-docker.sock
# (tests/support/container_fixtures.py also sets CONTAINERS_CONF by itself when the file exists).
#
# Not root: prints why and exits 0 without touching anything; the container tests then skip.
# As root, a failing step fails this script (so CI does not quietly skip the container tests).
# Environment: PYTHON (default python3), TOOLCHAIN_TEST_MIRROR (Debian mirror override),
#              TOOLCHAIN_SKIP_IMAGE=1 (set up podman but build no image, start no docker daemon).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONF=/etc/containers/toolchain-tests.conf
PACKAGES=(podman runc debootstrap)
# Installed without their recommends (docker.io and diffoscope-minimal would pull in hundreds of packages).
# redis-server: the shared compiler cache's store in tests (tests/support/redis_server.py starts its own; the
# package's service is not used)
LEAN_PACKAGES=(docker.io diffoscope-minimal docker-registry apache2-utils redis-server strace)
DOCKER_SOCK=/run/toolchain-docker.sock
DOCKER_DATA=/var/lib/toolchain-docker   # data-root (images, vfs layers) and dockerd.log
DOCKER_RUN=/run/toolchain-docker        # exec-root and the pid file
# The flags that work on this CI machine (no iptables, no bridge, cgroupfs: cgroup v1 without systemd, vfs).
DOCKERD_ARGS=(--iptables=false --ip-masq=false --bridge=none --exec-opt native.cgroupdriver=cgroupfs
              --storage-driver=vfs -H "unix://$DOCKER_SOCK"
              --data-root "$DOCKER_DATA/data" --exec-root "$DOCKER_RUN/exec" --pidfile "$DOCKER_RUN/dockerd.pid")
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
not_installed() {  # prints the packages of "$@" that dpkg does not list as installed
    local pkg
    for pkg in "$@"; do
        # (not `dpkg -s | grep -q`: grep quits early, dpkg gets SIGPIPE, and pipefail calls that missing)
        if [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" != "install ok installed" ]]; then
            printf '%s\n' "$pkg"
        fi
    done
}
mapfile -t missing < <(not_installed "${PACKAGES[@]}")
mapfile -t missing_lean < <(not_installed "${LEAN_PACKAGES[@]}")
if ((${#missing[@]} + ${#missing_lean[@]})); then
    log "installing ${missing[*]} ${missing_lean[*]}"
    t0=$(now)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    if ((${#missing[@]})); then
        apt-get install -y -qq -o Dpkg::Use-Pty=0 "${missing[@]}" >/dev/null
    fi
    if ((${#missing_lean[@]})); then
        apt-get install -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends "${missing_lean[@]}" >/dev/null
    fi
    log "apt done in $(($(now) - t0))s"
else
    log "packages already installed: ${PACKAGES[*]} ${LEAN_PACKAGES[*]}"
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
    image="$("$PYTHON" "$HERE/debian_image.py" build --engine podman)"
    log "test image: $image (ready in $(($(now) - t0))s)"
fi

# 4. docker: our own daemon, and the test image in it --------------------------------------
export DOCKER_HOST="unix://$DOCKER_SOCK"
docker_answers() { timeout 30 docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; }

if [[ "${TOOLCHAIN_SKIP_IMAGE:-}" == 1 ]]; then
    log "TOOLCHAIN_SKIP_IMAGE=1: not starting docker"
else
    # /usr/local/bin/docker (a newer client, if present) comes before Debian's /usr/bin/docker on PATH;
    # both speak to the daemon (the client negotiates the API version down), and this checks the one used.
    client="$(command -v docker)" || { log "no docker client on PATH after installing docker.io"; exit 1; }
    if docker_answers; then
        log "a docker engine answers on $DOCKER_SOCK"
    else
        pid="$(cat "$DOCKER_RUN/dockerd.pid" 2>/dev/null || true)"
        if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
            log "dockerd (pid $pid) is running but does not answer yet; waiting"
        else
            log "starting dockerd on $DOCKER_SOCK (log: $DOCKER_DATA/dockerd.log)"
            mkdir -p "$DOCKER_DATA" "$DOCKER_RUN"
            rm -f "$DOCKER_RUN/dockerd.pid"  # stale: its process is gone
            # its own session, so it outlives this script and the test run; stdin/out/err detached
            (cd / && exec setsid /usr/sbin/dockerd "${DOCKERD_ARGS[@]}" \
                </dev/null >>"$DOCKER_DATA/dockerd.log" 2>&1) &
        fi
        for _ in $(seq 60); do
            docker_answers && break
            sleep 1
        done
        if ! docker_answers; then
            log "dockerd does not answer on $DOCKER_SOCK after 60s; its log ends with:"
            tail -n 30 "$DOCKER_DATA/dockerd.log" >&2 || true
            exit 1
        fi
        log "dockerd answers on $DOCKER_SOCK"
    fi
    if ! versions="$(docker version --format '{{.Client.Version}} / server {{.Server.Version}}' 2>&1)"; then
        log "the docker client $client cannot talk to the daemon: $versions"
        exit 1
    fi
    log "docker client $client: $versions"
    t0=$(now)
    image="$("$PYTHON" "$HERE/debian_image.py" build --engine docker)"
    log "test image in docker: $image (ready in $(($(now) - t0))s)"
fi

log "done in $(($(now) - t_start))s. For the tests:"
echo "export CONTAINERS_CONF=$CONF"
echo "export DOCKER_HOST=unix://$DOCKER_SOCK"
