"""Getting exactly the locked files: every dependency file is fetched once (pip download, hashes required,
no index) into `<lock dir>/wheels/deps/`, and installs name each file with its sha256 (`--require-hashes`),
so a file that differs from the lock, or a dependency the lock does not name, is an error, never a download.

Pip's configuration never changes what the lock pins: pip runs for locked files with `PIP_CONFIG_FILE` set to
os.devnull (no pip.conf is read: not the site-wide one under XDG_CONFIG_DIRS, not the user's, not a named one)
and without the `PIP_*` variables that change resolution (constraint, index-url, find-links, no-binary, pre,
…). How to reach the index (cert, client-cert, proxy, trusted-host, timeout, retries, keyring-provider) is
kept: from the environment, or taken from those files into the environment (`locked_pip_env`)."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from toolchain.core.fs import atomic_write_text, sha256_file
from toolchain.core.proc.runner import CommandFailed, merge_env, run
from toolchain.errors import TestFailed, TransientError
from toolchain.resolve.closure import LockedDist
from toolchain.resolve.failure import classify, host_of, raise_classified

FETCH_TIMEOUT = 3600
FETCHING = "fetching the locked dependency files"


# pip settings that say how to reach an index, not what to take from it: kept for a locked fetch
PIP_TRANSPORT = frozenset(("cert", "client-cert", "proxy", "trusted-host", "timeout", "default-timeout", "retries",
                           "keyring-provider", "cache-dir", "no-cache-dir", "disable-pip-version-check", "no-input",
                           "progress-bar", "no-color", "root-user-action"))


def locked_pip_env(env: Mapping[str, str], *, read_config: bool = True) -> dict[str, str | None]:
    """The environment layer for a pip that fetches or installs locked files: no configuration file
    (PIP_CONFIG_FILE=os.devnull), every `PIP_*` variable removed but those of PIP_TRANSPORT, and (with
    `read_config`: the files are this machine's) the transport settings of the pip.conf files pip would have
    read, as `PIP_*` variables where the environment sets none."""
    from toolchain.build.pep517call import _pip_name

    layer: dict[str, str | None] = {k: None for k in env if k.startswith("PIP_") and _pip_name(k[4:]) not in PIP_TRANSPORT}
    if read_config:
        for name, value in _transport_settings(dict(env)).items():
            var = "PIP_" + name.upper().replace("-", "_")
            if var not in env:
                layer[var] = value
    layer["PIP_CONFIG_FILE"] = os.devnull
    return layer


def _transport_settings(env: dict[str, str]) -> dict[str, str]:
    """Transport settings of the pip.conf files (later files win, as in pip; [global] then [download] and
    [install])."""
    import configparser

    from toolchain.build.pep517call import _pip_config_files, _pip_name

    found: dict[str, str] = {}
    for path in _pip_config_files(env):
        parser = configparser.RawConfigParser()
        try:
            if not parser.read(path, encoding="utf-8"):
                continue
        except (configparser.Error, OSError, UnicodeDecodeError):
            continue
        for section in ("global", "download", "install"):
            for name in parser.options(section) if parser.has_section(section) else ():
                if _pip_name(name) in PIP_TRANSPORT:
                    found[_pip_name(name)] = parser.get(section, name)
    return found


def hashed_requirements(entries: Iterable[tuple[str, str]]) -> str:
    """A pip requirements file of (file path or `name @ URL`, sha256) lines, every one with its hash."""
    return "".join(f"{where} --hash=sha256:{sha}\n" for where, sha in entries)


def fetch_dists(dists: Sequence[LockedDist], dest: Path, log: Path) -> dict[str, Path]:
    """{name: local file} of every locked dependency, downloaded into `dest` unless already there with the
    locked sha256. Raises TestFailed naming each file that is missing or differs from the lock, TransientError
    for a network failure or a full disk."""
    try:
        return _fetch(dists, dest, log)
    except OSError as exc:  # our own writes (the folder, the requirements file)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise TransientError(f"{FETCHING} failed: no space left on device ({exc.filename or dest})",
                                 kind="disk-full", hint="free space there and run the same command again") from None
        raise


def _fetch(dists: Sequence[LockedDist], dest: Path, log: Path) -> dict[str, Path]:
    dest.mkdir(parents=True, exist_ok=True)
    want = [d for d in dists if not _have(dest / d.file, d.sha256)]
    if want:
        reqs = dest / ".fetch-requirements.txt"
        atomic_write_text(reqs, hashed_requirements((f"{d.name} @ {d.url}", d.sha256) for d in want))
        try:
            run([sys.executable, "-m", "pip", "download", "--no-input", "--progress-bar", "off", "--no-deps",
                 "--no-index", "--require-hashes", "-d", str(dest), "-r", str(reqs)], log=log,
                env=merge_env(os.environ, locked_pip_env(os.environ)), timeout=FETCH_TIMEOUT)
        except CommandFailed as exc:
            raise_classified(exc.tail, what=FETCHING, log=log, disk_fallback=str(dest), leave=("hash",))
            failure = classify(exc.tail)
            if failure is not None and failure.kind == "hash":
                named = [d for d in want if d.file in exc.tail or d.name in exc.tail.lower()] or want
                raise TestFailed(f"{FETCHING} failed: hash mismatch: "
                                 f"{', '.join(f'{d.file} from {host_of(d.url) or d.url}' for d in named)} has "
                                 f"another sha256 than the lock records",
                                 hint="the index changed or damaged the file since the lock was made: find out why "
                                      "(ask its owner); `toolchain lock --lock LOCK --refresh` pins what it serves "
                                      f"now (log: {log})") from None
            cause = [line.strip() for line in exc.tail.splitlines() if line.strip().startswith("ERROR:")]
            gone = any(w in exc.tail for w in ("404", "Not Found", "410 Client Error"))
            raise TestFailed(f"the locked dependency files could not be fetched with their sha256 checked: "
                             f"{cause[-1] if cause else 'pip download failed'}\n{exc.tail}",
                             hint=(f"a locked file is gone from its index; `toolchain lock --lock LOCK --refresh` "
                                   f"resolves again (log: {log})") if gone else
                                  f"pip's own words are above (no pip configuration was read: the lock names each "
                                  f"file); log: {log}") from None
    problems = [f"{d.file}: {'missing' if not (dest / d.file).is_file() else 'sha256 ' + sha256_file(dest / d.file)}"
                f", the lock records {d.sha256}" for d in dists if not _have(dest / d.file, d.sha256)]
    if problems:
        raise TestFailed("dependency files do not match the lock:\n" + "\n".join(f"  - {p}" for p in problems),
                         hint="remove them and fetch again, or re-resolve with `toolchain lock --lock LOCK --refresh`")
    return {d.name: dest / d.file for d in dists}


def _have(path: Path, sha: str) -> bool:
    return path.is_file() and sha256_file(path) == sha
