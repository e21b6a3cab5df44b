"""Resolve once per change: a resolved closure is kept under a key made of what determines it, and a build,
rebuild or bisect step whose key is kept resolves nothing and needs no network.

The key is each built wheel's metadata (name, Requires-Dist but for the lines only an unrequested extra asks
for, Requires-Python, and its version where another
built wheel requires it; never the wheel's own hash, so a bisect step that changed no requirement reuses the
previous closure), the recipe's [resolve] settings (with the file names in a local find-links folder), and
the target's Python version and platform.
An entry is the closure with every file's sha256 and when it was resolved, and the inputs the resolver read
that the key does not name by content: each local find-links folder and every file in it, with its stat_key
(core/probe_memo.py); an entry is taken only while all of them are unchanged (a wheel rewritten in place under
the same name resolves again). `toolchain lock --refresh` resolves again on purpose.

Cheap on purpose (a warm build takes this path): the metadata is read from the wheel's zip without the email
parser, and nothing here imports packaging or the resolver.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from toolchain.build.wheelmeta import WheelMeta
from toolchain.core.fs import atomic_write_text, sha256_bytes
from toolchain.core.regex import SHA256_HEX, Regex
from toolchain.core.serial import to_data
from toolchain.core.trust import read_sealed, sealed
from toolchain.recipe.model import ResolveSpec
from toolchain.resolve.closure import Closure, canonical_name
from toolchain.target.facts import TargetInfo

DEFAULT_MANYLINUX = "2_28"  # uv's x86_64-unknown-linux-gnu is manylinux_2_28 too
MEMO_DIR = "closures"       # under the resolver's cache folder
FORMAT = 2  # 2: the inputs with their stat_key


def target_python(spec: ResolveSpec, target: TargetInfo) -> str:
    """The major.minor Python the closure is resolved for: the recipe's, else the probed target's."""
    if spec.python_version:
        return spec.python_version
    if target.python_version:
        return ".".join(target.python_version.split(".")[:2])
    import sys

    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def target_platform(spec: ResolveSpec, target: TargetInfo) -> str:
    """uv's --python-platform: the recipe's, or the probed platform (linux_x86_64 → x86_64-manylinux_2_28)."""
    if spec.platform:
        return spec.platform
    machine = (target.platform or "").removeprefix("linux_")
    if machine != target.platform and machine.replace("_", "a").isalnum():  # ^linux_(\w+)\Z
        return f"{machine}-manylinux_{DEFAULT_MANYLINUX}"
    import platform as _platform

    return f"{_platform.machine() or 'x86_64'}-manylinux_{DEFAULT_MANYLINUX}"


def expand_link(link: str) -> str:
    """`{demo}` is the folder of the demo's shipped files (toolchain/demo_src) wherever the tool is installed."""
    if link.startswith("{demo}"):
        from toolchain.sources.demo import SRC

        return str(SRC) + link[len("{demo}"):]
    return link


def _local_files(link: str) -> list[str]:
    """The file names in a local find-links folder: a wheel dropped into it is a change (a remote one's
    contents are what `toolchain lock --refresh` asks again)."""
    if "://" in link:
        return []
    try:
        return sorted(entry.name for entry in os.scandir(expand_link(link)) if entry.is_file())
    except OSError:
        return []


def local_inputs(spec: ResolveSpec) -> list[str]:
    """What the resolver reads of the recipe's local find-links: each folder and every file in it."""
    found = []
    for link in spec.find_links:
        if "://" in link:
            continue
        folder = expand_link(link)
        found.append(folder)
        found += [f"{folder}/{name}" for name in _local_files(link)]
    return found


def _required_names(built: Sequence[tuple[str, WheelMeta]]) -> set[str]:
    """The names the built wheels' Requires-Dist lines ask for (normalized)."""
    names = set()
    for _, meta in built:
        for line in meta.requires_dist:
            m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
            if m:
                names.add(canonical_name(m.group(1)))
    return names


_EXTRA_ONLY = Regex(r"""\s*extra\s*==\s*(?:"[^"]*"|'[^']*')\s*""")  # a marker that holds for one extra alone
_HEAD = Regex(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[)?")  # a requirement's name, and whether it asks for extras


def resolution_requires(built: Sequence[WheelMeta]) -> list[list[str]]:
    """Each built wheel's Requires-Dist lines as the resolver takes them: without those only an extra asks for
    (`numba; extra == "cpu"`: the built wheels are asked for without extras), unless a built wheel asks for an
    extra of it or the line names a built wheel (its note on an unmet version). Two commits whose wheels differ
    only there (auto-round's `cpu` extra lost numba) have one closure, resolved once."""
    names = {canonical_name(m.name) for m in built}
    asked = {canonical_name(h.group(1)) for m in built for h in map(_HEAD.match, m.requires_dist) if h and h.group(2)}

    def kept(meta: WheelMeta, line: str) -> bool:
        head, sep, marker = line.partition(";")
        if not sep or _EXTRA_ONLY.fullmatch(marker) is None or canonical_name(meta.name) in asked:
            return True
        name = _HEAD.match(head)
        return name is None or canonical_name(name.group(1)) in names

    return [[line for line in m.requires_dist if kept(m, line)] for m in built]


def closure_key(spec: ResolveSpec, target: TargetInfo, built: Sequence[tuple[str, WheelMeta]]) -> str:
    """The sha256 of what determines the closure of `built` [(component, metadata)] (lock order). A built
    wheel's version is part of it only where another built wheel's requirement names it: the resolver is
    given the built wheels as overrides, so their versions change no pin; they change only the notes on
    requirements of one built wheel on another (a version that bumps at every commit, as setuptools-scm's
    do, would otherwise resolve every bisect step again)."""
    required = _required_names(built)
    requires = resolution_requires([m for _, m in built])
    data = {"format": FORMAT,
            "local-files": {link: _local_files(link) for link in spec.find_links},
            "wheels": [{"component": comp, "name": m.name,
                        "version": m.version if canonical_name(m.name) in required else "",
                        "requires-dist": lines, "requires-python": m.requires_python}
                       for (comp, m), lines in zip(built, requires, strict=True)],
            "resolve": {"indexes": list(spec.indexes), "find-links": list(spec.find_links),
                        "index-strategy": spec.index_strategy, "platform": spec.platform,
                        "python-version": spec.python_version},
            "python": target_python(spec, target), "platform": target_platform(spec, target)}
    return sha256_bytes(json.dumps(data, sort_keys=True).encode())


class ClosureMemo:
    """Resolved closures by key, one JSON file each (written atomically: a kill or a concurrent run leaves a
    whole entry or none). A damaged entry, or one the cache's trust rule refuses (core/trust.py), is a miss."""

    def __init__(self, resolve_cache: Path) -> None:
        self.dir = resolve_cache / MEMO_DIR

    def path(self, key: str) -> Path:
        """The memo file of the closure resolved for `key`."""
        return self.dir / f"{key}.json"

    def get(self, key: str) -> Closure | None:
        """The closure remembered for `key`, None for a miss (a missing, stale or unreadable file, or one of
        the inputs it records changed)."""
        from toolchain.core.probe_memo import stat_key

        try:
            data = read_sealed(self.path(key), key)  # (a FIFO, another user's, renamed or edited: a miss)
            if data is None or data.get("format") != FORMAT or data.get("key") != key:
                return None
            if not all(stat_key(p) == k for p, k in data["inputs"].items()):
                return None
            closure = Closure.from_toml(data["resolve"], data["dependencies"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        if not all(SHA256_HEX.match(d.sha256) for d in closure.dists):
            return None
        return closure

    def put(self, key: str, closure: Closure, inputs: Mapping[str, list[int] | None] | None = None) -> None:
        """Remember the closure resolved for `key` with its inputs ({path: stat_key before it was resolved}),
        written atomically."""
        self.dir.mkdir(parents=True, exist_ok=True)
        data = {"format": FORMAT, "key": key, "resolve": closure.settings(),
                "dependencies": to_data(closure.dists, kebab=True),
                "inputs": dict(sorted((inputs or {}).items()))}
        atomic_write_text(self.path(key), sealed(key, data) + "\n")
