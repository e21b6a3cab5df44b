#!/usr/bin/env python3
"""Build (once) and find the Debian bookworm image used by the container tests.

No image registry is reachable, so the image is made from Debian packages with
``debootstrap`` and imported with ``podman import``.  Docker gets the same image by
``podman save`` + ``docker load`` (same name, same content; no second debootstrap);
only when podman is unusable is it debootstrapped and ``docker import``-ed directly.

The image name is ``localhost/toolchain-test-bookworm:<hash12>`` where the hash
covers everything that decides the image's content (package list, suite,
variant, mirror, architecture, recipe version).  If an image with that name
exists, nothing is built.

A build is atomic: the root file system is made in a temporary directory,
imported under a temporary tag, checked (python3 and gcc run inside), and only
then tagged with the final name.  A per-engine file lock serialises concurrent
builders; a killed build leaves at most a temporary tag and a temporary
directory behind, and the next build removes them.

CLI::

    python tests/support/debian_image.py build [--engine podman|docker]   # prints the image name
    python tests/support/debian_image.py name                             # prints the name, builds nothing
    python tests/support/debian_image.py check [--engine ...]             # is the engine usable? (exit 0/1)

Environment:

    CONTAINERS_CONF               podman config; if unset and CONTAINERS_CONF_PATH exists, that is used
    TOOLCHAIN_TEST_MIRROR         Debian mirror URL (default: read from /etc/apt)
    TOOLCHAIN_TEST_IMAGE_WORKDIR  lock files, logs and temporary build dirs
                                  (default /var/tmp/toolchain-test-image)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

# Bump when the build steps change in a way that changes the image content.
RECIPE_VERSION = 2

SUITE = "bookworm"
VARIANT = "minbase"
PACKAGES: tuple[str, ...] = (
    "python3",
    "python3-pip",
    "python3-venv",
    "python3-setuptools",
    "python3-wheel",
    "git",
    "gcc",
    "libc6-dev",
    "libpython3-dev",  # Python.h: the demo kernels are C extensions
)
IMAGE_REPO = "localhost/toolchain-test-bookworm"
TEMP_REPO = IMAGE_REPO + "-tmp"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

# Written by tests/support/ci_setup.sh.
CONTAINERS_CONF_PATH = "/etc/containers/toolchain-tests.conf"

ENGINES = ("podman", "docker")
DEBOOTSTRAP_TIMEOUT = 45 * 60
ENGINE_TIMEOUT = 120


class ImageBuildError(RuntimeError):
    """The test image could not be built."""


def _log(msg: str) -> None:
    print(f"[debian_image] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- environment


def containers_env(base: Optional[Mapping[str, str]] = None) -> dict:
    """A copy of ``base`` (default os.environ) with CONTAINERS_CONF set when the
    test config file exists and the caller did not set one."""
    env = dict(os.environ if base is None else base)
    if not env.get("CONTAINERS_CONF") and os.path.isfile(CONTAINERS_CONF_PATH):
        env["CONTAINERS_CONF"] = CONTAINERS_CONF_PATH
    return env


def configure_containers_conf() -> Optional[str]:
    """Set os.environ["CONTAINERS_CONF"] (if unset and the file exists); return its value."""
    if not os.environ.get("CONTAINERS_CONF") and os.path.isfile(CONTAINERS_CONF_PATH):
        os.environ["CONTAINERS_CONF"] = CONTAINERS_CONF_PATH
    return os.environ.get("CONTAINERS_CONF")


def _run(argv: Sequence[str], *, timeout: float = ENGINE_TIMEOUT, check: bool = False,
         **kwargs: Any) -> subprocess.CompletedProcess:
    kwargs.setdefault("env", containers_env())
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    try:
        proc = subprocess.run(list(argv), timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as e:
        raise ImageBuildError(f"timed out after {timeout}s: {' '.join(argv)}") from e
    if check and proc.returncode != 0:
        raise ImageBuildError(
            f"command failed (exit {proc.returncode}): {' '.join(argv)}\n{_tail(proc.stderr or proc.stdout)}")
    return proc


def _tail(text: Optional[str], lines: int = 30) -> str:
    if not text:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def _engine_available(engine: str) -> tuple[bool, str]:
    exe = shutil.which(engine)
    if exe is None:
        return False, f"{engine} is not installed (not on PATH)"
    try:
        proc = _run([exe, "info", "--format", "{{json .}}"], timeout=60)
    except ImageBuildError as e:
        return False, f"`{engine} info` {e}"
    except OSError as e:
        return False, f"cannot run {exe}: {e}"
    if proc.returncode != 0:
        why = _tail(proc.stderr or proc.stdout, 5) or f"exit {proc.returncode}"
        return False, f"`{engine} info` failed: {why}"
    return True, f"{engine} answers `info`"


def podman_available() -> tuple[bool, str]:
    """(usable, reason): podman is installed and `podman info` succeeds."""
    ok, reason = _engine_available("podman")
    if ok:
        conf = containers_env().get("CONTAINERS_CONF")
        reason += f" (CONTAINERS_CONF={conf})" if conf else " (CONTAINERS_CONF unset)"
    return ok, reason


def docker_available() -> tuple[bool, str]:
    """(usable, reason): a docker client is installed and an engine answers `docker info`."""
    return _engine_available("docker")


# --------------------------------------------------------------------------- identity


def _parse_deb822(text: str) -> Iterator[dict]:
    stanza: dict = {}
    key = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if stanza:
                yield stanza
            stanza, key = {}, None
            continue
        if line[0] in " \t" and key:
            stanza[key] += " " + line.strip()
            continue
        if ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            stanza[key] = value.strip()
    if stanza:
        yield stanza


def _candidate_mirrors(suite: str) -> Iterator[str]:
    """Mirror URLs that serve ``suite`` (not -security/-updates), in the order apt lists them."""
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for st in _parse_deb822(text):
            if st.get("enabled", "yes").lower() == "no":
                continue
            if "deb" not in st.get("types", "").split():
                continue
            if suite not in st.get("suites", "").split():
                continue
            yield from st.get("uris", "").split()
    lists = ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]
    for path in lists:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            if not words or words[0] != "deb":
                continue
            words = words[1:]
            if words and words[0].startswith("["):  # options: [arch=amd64 signed-by=...]
                while words and not words[0].endswith("]"):
                    words.pop(0)
                words = words[1:]
            if len(words) >= 2 and words[1] == suite:
                yield words[0]


def mirror_url(suite: str = SUITE) -> str:
    """The Debian mirror to debootstrap from: $TOOLCHAIN_TEST_MIRROR, else the
    first apt source serving ``suite``, else deb.debian.org."""
    env = os.environ.get("TOOLCHAIN_TEST_MIRROR")
    if env:
        return env.rstrip("/")
    for uri in _candidate_mirrors(suite):
        if uri.startswith(("http://", "https://", "file:/")):
            return uri.rstrip("/")
    return DEFAULT_MIRROR


def _architecture() -> str:
    try:
        out = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                             timeout=30, stdin=subprocess.DEVNULL)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return os.uname().machine


def image_spec(mirror: Optional[str] = None) -> dict:
    """Everything that decides the image's content."""
    return {
        "recipe-version": RECIPE_VERSION,
        "suite": SUITE,
        "variant": VARIANT,
        "packages": sorted(PACKAGES),
        "mirror": mirror or mirror_url(),
        "arch": _architecture(),
    }


def image_hash(spec: Optional[dict] = None) -> str:
    spec = image_spec() if spec is None else spec
    blob = json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def image_name(spec: Optional[dict] = None) -> str:
    return f"{IMAGE_REPO}:{image_hash(spec)[:12]}"


# --------------------------------------------------------------------------- engine helpers


def _image_exists(engine: str, ref: str) -> bool:
    if engine == "podman":
        return _run(["podman", "image", "exists", ref]).returncode == 0
    return _run([engine, "image", "inspect", "--format", "{{.Id}}", ref]).returncode == 0


def _remove_tag(engine: str, ref: str) -> None:
    _run([engine, "rmi", ref])  # only untags when another tag points at the image


def _list_refs(engine: str, repo: str) -> list:
    proc = _run([engine, "images", "--format", "{{.Repository}}:{{.Tag}}"])
    if proc.returncode != 0:
        return []
    return [r for r in proc.stdout.split() if r.split(":", 1)[0] == repo]


def _workdir() -> Path:
    d = Path(os.environ.get("TOOLCHAIN_TEST_IMAGE_WORKDIR", "/var/tmp/toolchain-test-image"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[int]:
    """Hold an exclusive flock on ``path``; yields the lock's file descriptor.

    Passing that descriptor to a child (``pass_fds``) keeps the lock held until the
    child exits too, so an orphaned debootstrap of a killed build keeps others out
    of its directory."""
    with open(path, "a+") as fh:
        t0 = time.monotonic()
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log(f"waiting for another build holding {path}")
            fcntl.flock(fh, fcntl.LOCK_EX)
            _log(f"lock acquired after {time.monotonic() - t0:.0f}s")
        try:
            yield fh.fileno()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _mounts_under(path: Path) -> list:
    """Mount points at or below ``path``, deepest first."""
    real = os.path.realpath(path)
    found = set()
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) < 5:
                    continue
                mp = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
                if mp == real or mp.startswith(real + "/"):
                    found.add(mp)
    except OSError:
        pass
    return sorted(found, key=len, reverse=True)


def _remove_tree(path: Path) -> bool:
    """Remove a build directory, first unmounting what a killed debootstrap left mounted
    in it (proc, sys, dev...). Never recurses into a mount: if one cannot be
    unmounted, the directory is left in place and False returned."""
    if not path.exists():
        return True
    for mp in _mounts_under(path):
        if subprocess.run(["umount", mp], capture_output=True, stdin=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["umount", "-l", mp], capture_output=True, stdin=subprocess.DEVNULL)
    left = _mounts_under(path)
    if left:
        _log(f"not removing {path}: still mounted: {', '.join(left)}")
        return False
    shutil.rmtree(path, ignore_errors=True)
    return not path.exists()


def _clean_leftovers(engine: str, workdir: Path) -> None:
    """Remove what killed builds left behind. Only call while holding the engine lock."""
    for ref in _list_refs(engine, TEMP_REPO):
        _log(f"removing leftover temporary image {ref}")
        _remove_tag(engine, ref)
    for d in workdir.glob(f"{engine}-build-*"):
        _log(f"removing leftover build directory {d}")
        _remove_tree(d)
    for f in workdir.glob(f"{engine}-load-*.tar"):
        _log(f"removing leftover image archive {f}")
        with contextlib.suppress(OSError):
            f.unlink()


# --------------------------------------------------------------------------- build


def _debootstrap(rootfs: Path, mirror: str, log_path: Path, lock_fd: int) -> None:
    exe = shutil.which("debootstrap")
    if exe is None:
        raise ImageBuildError("debootstrap is not installed (apt-get install debootstrap)")
    argv = [exe, f"--variant={VARIANT}", "--include=" + ",".join(PACKAGES)]
    if os.path.isfile(KEYRING):
        argv.append(f"--keyring={KEYRING}")
    argv += [SUITE, str(rootfs), mirror]
    _log(f"debootstrap {SUITE} from {mirror} (log: {log_path})")
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=DEBOOTSTRAP_TIMEOUT, pass_fds=(lock_fd,))
        except subprocess.TimeoutExpired as e:
            raise ImageBuildError(f"debootstrap timed out after {DEBOOTSTRAP_TIMEOUT}s; log: {log_path}") from e
    if proc.returncode != 0:
        tail = _tail(log_path.read_text(errors="replace"), 40)
        raise ImageBuildError(f"debootstrap failed (exit {proc.returncode}); log: {log_path}\n{tail}")
    # Trim what a test image does not need; keep the apt sources debootstrap wrote.
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_Packages",
                    "var/lib/apt/lists/*_InRelease", "var/lib/apt/lists/*_Release*"):
        for p in rootfs.glob(pattern):
            with contextlib.suppress(OSError):
                p.unlink()
    for name in ("etc/hostname", "etc/resolv.conf"):  # host's values; the engine provides its own
        p = rootfs / name
        if p.is_file() and not p.is_symlink():
            p.write_text("")


def _import(engine: str, rootfs: Path, ref: str, full_hash: str, lock_fd: int) -> None:
    tar_argv = ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."]
    imp_argv = [engine, "import",
                "--change", 'CMD ["/bin/bash"]',
                "--change", "ENV LANG=C.UTF-8",
                "--change", f"LABEL org.toolchain.test-image.hash={full_hash}",
                "-", ref]
    _log(f"importing into {engine} as {ref}")
    with subprocess.Popen(tar_argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, pass_fds=(lock_fd,)) as tar:
        try:
            imp = subprocess.run(imp_argv, stdin=tar.stdout, capture_output=True, text=True,
                                 env=containers_env(), timeout=DEBOOTSTRAP_TIMEOUT)
        except subprocess.TimeoutExpired as e:
            tar.kill()
            raise ImageBuildError(f"{engine} import timed out") from e
        finally:
            assert tar.stdout is not None and tar.stderr is not None  # both are pipes
            tar.stdout.close()
        tar_err = tar.stderr.read().decode(errors="replace")
        tar.wait()
    if tar.returncode != 0:
        raise ImageBuildError(f"tar failed (exit {tar.returncode}): {_tail(tar_err)}")
    if imp.returncode != 0:
        raise ImageBuildError(f"{engine} import failed (exit {imp.returncode}): {_tail(imp.stderr)}")


def _check_image(engine: str, ref: str) -> None:
    script = "python3 --version && gcc --version >/dev/null && git --version >/dev/null"
    proc = _run([engine, "run", "--rm", "--network=none", ref, "/bin/sh", "-c", script], timeout=300)
    if proc.returncode != 0:
        raise ImageBuildError(
            f"new image {ref} failed its check (exit {proc.returncode}): {_tail(proc.stderr or proc.stdout)}")
    _log(f"check ok: {proc.stdout.strip()}")


def _podman_usable() -> bool:
    return shutil.which("podman") is not None and podman_available()[0]


def copy_from_podman(ref: str, engine: str = "docker") -> None:
    """Put podman's image ``ref`` into ``engine`` under the same name: ``podman save`` to a file in the
    work directory, ``<engine> load`` of it, file removed. Serialised by the engine's lock."""
    workdir = _workdir()
    with _locked(workdir / f"{engine}.lock") as lock_fd:
        if _image_exists(engine, ref):
            return
        _clean_leftovers(engine, workdir)
        t0 = time.monotonic()
        fd, tmp = tempfile.mkstemp(prefix=f"{engine}-load-", suffix=".tar", dir=workdir)
        os.close(fd)
        try:
            os.unlink(tmp)  # podman save refuses to overwrite
            _log(f"podman save {ref} -> {engine} load")
            _run(["podman", "save", "--format", "docker-archive", "--output", tmp, ref], check=True,
                 timeout=DEBOOTSTRAP_TIMEOUT, pass_fds=(lock_fd,))
            _run([engine, "load", "--input", tmp], check=True, timeout=DEBOOTSTRAP_TIMEOUT, pass_fds=(lock_fd,))
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if not _image_exists(engine, ref):
            raise ImageBuildError(f"`{engine} load` did not create {ref}")
        _log(f"{ref} loaded into {engine} in {time.monotonic() - t0:.0f}s")


def build_image(engine: str = "podman", spec: Optional[dict] = None) -> str:
    """Build the image for ``engine`` unless it exists; return its name.

    docker: copied from podman (built there first if needed) when podman works; built directly otherwise."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    spec = image_spec() if spec is None else spec
    full_hash = image_hash(spec)
    final = f"{IMAGE_REPO}:{full_hash[:12]}"
    if _image_exists(engine, final):
        return final
    if engine != "podman" and _podman_usable():
        copy_from_podman(build_image("podman", spec), engine)
        return final
    if os.geteuid() != 0:
        raise ImageBuildError(f"{final} is missing and building it needs root (debootstrap)")

    workdir = _workdir()
    with _locked(workdir / f"{engine}.lock") as lock_fd:
        if _image_exists(engine, final):  # another builder finished while we waited
            return final
        _clean_leftovers(engine, workdir)
        t0 = time.monotonic()
        build_dir = Path(tempfile.mkdtemp(prefix=f"{engine}-build-{full_hash[:12]}-", dir=workdir))
        temp_ref = f"{TEMP_REPO}:{full_hash[:12]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            rootfs = build_dir / "rootfs"
            rootfs.mkdir()
            _debootstrap(rootfs, spec["mirror"], workdir / f"build-{full_hash[:12]}.log", lock_fd)
            _import(engine, rootfs, temp_ref, full_hash, lock_fd)
            _remove_tree(build_dir)
            _check_image(engine, temp_ref)
            _run([engine, "tag", temp_ref, final], check=True)
        finally:
            _remove_tree(build_dir)
            if _image_exists(engine, temp_ref):
                _remove_tag(engine, temp_ref)
        _log(f"built {final} in {time.monotonic() - t0:.0f}s")
    return final


def ensure_image(engine: str = "podman") -> str:
    """For pytest fixtures: the image name, built on first use."""
    configure_containers_conf()
    return build_image(engine)


# --------------------------------------------------------------------------- CLI


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Build/find the Debian test image for container tests.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_build = sub.add_parser("build", help="build the image unless it exists; print its name")
    p_build.add_argument("--engine", choices=ENGINES, default="podman")
    sub.add_parser("name", help="print the image name (builds nothing)")
    sub.add_parser("spec", help="print what the image hash covers, as JSON")
    p_check = sub.add_parser("check", help="report whether the engine is usable")
    p_check.add_argument("--engine", choices=ENGINES, default="podman")
    args = parser.parse_args(argv)

    if args.cmd == "name":
        print(image_name())
        return 0
    if args.cmd == "spec":
        print(json.dumps(image_spec(), indent=2, sort_keys=True))
        return 0
    if args.cmd == "check":
        ok, reason = podman_available() if args.engine == "podman" else docker_available()
        print(reason)
        return 0 if ok else 1
    ok, reason = podman_available() if args.engine == "podman" else docker_available()
    if not ok:
        print(f"debian_image: {args.engine} is not usable: {reason}", file=sys.stderr)
        return 1
    try:
        print(build_image(args.engine))
    except ImageBuildError as e:
        print(f"debian_image: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
