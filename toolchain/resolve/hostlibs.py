"""Whether a run host has the libraries a lock expects of it (each wheel's `host-provides`, the native audit's
verdict at build), read as files under the host root (`TOOLCHAIN_HOST_ROOT`, default `/`): the loader's default
folders and those `/etc/ld.so.conf` (and its `include`s) names. Nothing runs: `toolchain doctor --lock LOCK`
says which are present and, for each absent one, which package brings it (an absent library an extension module
of a component loads is `missing`, one only a plugin or the closure needs a `warn`)."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

from toolchain.resolve.native import WheelAudit
from toolchain.resolve.policy import Policy
from toolchain.resolve.verdicts import loaded_objects
from toolchain.target.doctor import Finding

DEFAULT_DIRS = ("lib64", "usr/lib64", "lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib", "usr/lib",
                "usr/local/lib")
LD_SO_CONF = "etc/ld.so.conf"


def _conf_dirs(root: Path, conf: Path, seen: set[Path]) -> list[str]:
    """The folders an ld.so.conf names (as absolute paths of the host), following `include` globs."""
    if conf in seen:
        return []
    seen.add(conf)
    try:
        text = conf.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("include"):
            pattern = line.split(None, 1)[1] if len(line.split(None, 1)) > 1 else ""
            if not pattern.startswith("/"):
                pattern = str(Path("/etc") / pattern)
            for path in sorted(glob.glob(str(root / pattern.lstrip("/")))):
                out += _conf_dirs(root, Path(path), seen)
        elif line.startswith("/"):
            out.append(line)
    return out


def host_libraries(root: Path) -> dict[str, str]:
    """{file name: its path on the host} of every shared object the loader finds under `root` by default."""
    dirs = [*_conf_dirs(root, root / LD_SO_CONF, set()), *(f"/{d}" for d in DEFAULT_DIRS)]
    found: dict[str, str] = {}
    for d in dict.fromkeys(dirs):
        try:
            names = os.listdir(root / d.lstrip("/"))
        except OSError:
            continue
        for name in sorted(names):
            if ".so" in name:
                found.setdefault(name, f"{d.rstrip('/')}/{name}")
    return found


def host_library_findings(audits: Sequence[WheelAudit], root: Path, policy: Policy, lock_name: str) -> list[Finding]:
    """One finding for the libraries present, one per absent library with the package that brings it."""
    expected: dict[str, list[str]] = {}
    loaded: set[str] = set()
    for a in audits:
        mine = loaded_objects(a) if a.role != "dependency" else set()
        for so in a.host_provides:
            expected.setdefault(so, []).append(a.dist or a.wheel)
            if any(so in o.needed for o in a.objects if o.path in mine):
                loaded.add(so)
    if not expected:
        return [Finding("host libraries", "ok", f"{lock_name} expects no library of the run host (no host-provides)")]
    have = host_libraries(root)
    present = sorted(so for so in expected if so in have)
    out = [Finding("host libraries", "ok" if len(present) == len(expected) else "warn",
                   f"{len(present)} of the {len(expected)} {lock_name} expects of the run host are present"
                   + (f": {', '.join(present[:12])}{' …' if len(present) > 12 else ''}" if present else ""))]
    for so in sorted(set(expected) - set(present)):
        pkg = policy.host_package(so)
        shipper = pkg or policy.shipper(so)
        brings = (f"apt install {pkg.debian} ({pkg.by})" if pkg is not None else
                  f"install {shipper.by}" if shipper is not None else "install the package that ships it")
        needed_by = ", ".join(dict.fromkeys(expected[so]))
        out.append(Finding(f"host library {so}", "missing" if so in loaded else "warn",
                           f"absent; needed by {needed_by}" + ("" if so in loaded else " (only by a plugin or the "
                                                                                         "closure: loaded on demand)"),
                           brings))
    return out
