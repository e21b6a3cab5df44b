"""What a built wheel says of itself: the header fields of its `*.dist-info/METADATA` (name, version, what it
requires), read from the zip without the email parser or packaging (a warm build takes this path: the
closure's key, resolve/closure_memo.py; the checks pip makes of a wheel it built, build/frontend.py)."""

from __future__ import annotations

import os
from pathlib import Path

from toolchain.core.record import record


@record
class WheelMeta:
    """What a built wheel says of itself and asks of the closure (its METADATA)."""
    name: str
    version: str
    requires_dist: tuple[str, ...]
    requires_python: str
    metadata_version: str = ""  # (not part of the closure's key)

    @property
    def has_requirements(self) -> bool:
        """Whether the wheel declares any Requires-Dist."""
        return bool(self.requires_dist)


def wheel_meta(wheel: Path) -> WheelMeta:
    """The wheel's Name, Version, Requires-Dist, Requires-Python and Metadata-Version, read from
    `*.dist-info/METADATA`."""
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        text = zf.read(meta).decode("utf-8", errors="replace")
    fields: dict[str, list[str]] = {}
    last = ""
    for line in text.split("\n"):
        if not line.strip():
            break  # the headers end at the first empty line (the description follows)
        if line[0] in " \t" and last:  # a folded header line
            fields[last][-1] += " " + line.strip()
            continue
        name, _, value = line.partition(":")
        last = name.strip().lower()
        fields.setdefault(last, []).append(value.strip())
    return WheelMeta(name=(fields.get("name") or [""])[0], version=(fields.get("version") or [""])[0],
                     requires_dist=tuple(fields.get("requires-dist", ())),
                     requires_python=(fields.get("requires-python") or [""])[0],
                     metadata_version=(fields.get("metadata-version") or [""])[0])


def remembered_wheel_meta(wheel: Path, memo_dir: Path) -> WheelMeta:
    """`wheel_meta(wheel)`, remembered under `memo_dir` while the wheel's stat_key stays (core/probe_memo: a
    rewritten file has a new ctime): a warm build opens no zip (nor imports zipfile). A wheel that changed while
    it was read is not remembered."""
    from toolchain.core.probe_memo import remembered, stat_key
    from toolchain.core.serial import Data, from_data, to_table

    name = os.path.abspath(wheel)

    def compute() -> tuple[dict[str, Data], dict[str, list[int] | None] | None]:
        before = stat_key(name)
        meta = to_table(wheel_meta(Path(name)))
        return meta, {name: before} if before is not None and stat_key(name) == before else None

    return from_data(WheelMeta, remembered(memo_dir, "wheel-meta", {"path": name}, compute))
