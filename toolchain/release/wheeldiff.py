"""Compare two sets of wheels and explain every difference.

Wheels are matched by distribution name. Each pair is compared by sha256; a differing pair is opened and
compared entry by entry, naming the files inside that differ, with a content diff: `diffoscope` when it is
installed, otherwise our own (a unified diff for text; for binaries the first differing offsets as hex and
the printable strings found in only one side). When every entry has the same content, the archive metadata
that differs (order, timestamps, permissions) is named instead.
"""

from __future__ import annotations

import difflib
import re
import shutil
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from toolchain.core.fs import sha256_file
from toolchain.core.proc.runner import run
from toolchain.core.record import field, record
from toolchain.core.serial import Data, meta, to_table

MAX_DIFF_LINES = 60
MAX_OFFSETS = 4
MAX_STRINGS = 8
CONTEXT_BYTES = 16
DIFFOSCOPE_TIMEOUT = 600
_STRINGS = re.compile(rb"[\x20-\x7e]{6,}")


@record
class FileDiff:
    """One entry that differs between two builds of a wheel, and how."""
    path: str            # entry inside the wheel
    change: str          # "changed" | "only-in-a" | "only-in-b" | "metadata"
    detail: str = ""     # the content diff or what differs in the metadata


@record(kw_only=True)
class WheelDiff:
    """Two builds of one wheel that differ: their files and hashes, and every entry that differs."""
    key: str = field(metadata=meta(skip=True))  # canonical distribution name
    file_a: str = field(metadata=meta(key="wheel"))
    file_b: str = field(metadata=meta(key="wheel-b"))
    sha256_a: str
    sha256_b: str
    files: tuple[FileDiff, ...] = ()
    diffoscope: str = ""           # diffoscope's text report, when it ran

    @property
    def paths(self) -> list[str]:
        """The entries that differ between the two builds of the wheel."""
        return [f.path for f in self.files]


@record(kw_only=True)
class ReproReport:
    """A comparison of two sets of wheels: the identical ones, the differing ones and those without a counterpart."""
    label_a: str = field(metadata=meta(key="a"))
    label_b: str = field(metadata=meta(key="b"))
    identical: tuple[str, ...] = ()          # wheel files equal in both sets
    differing: tuple[WheelDiff, ...] = ()
    only_a: tuple[str, ...] = field(default=(), metadata=meta(key="only-in-a"))  # wheel files without a counterpart
    only_b: tuple[str, ...] = field(default=(), metadata=meta(key="only-in-b"))
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """Whether the two sets of wheels are identical (nothing differs, nothing lacks a counterpart)."""
        return not (self.differing or self.only_a or self.only_b)

    def to_dict(self) -> dict[str, Data]:
        """verify-repro's report (kebab-case keys, as its JSON has always had): `reproducible`, then the fields."""
        return {"reproducible": self.ok, **to_table(self, kebab=True)}


def wheel_key(path: Path | str) -> str:
    """The canonical distribution name a wheel file is compared by (the file name when it is no wheel name)."""
    from packaging.utils import (
        InvalidWheelFilename,
        canonicalize_name,
        parse_wheel_filename,
    )

    name = Path(path).name
    try:
        return str(canonicalize_name(parse_wheel_filename(name)[0]))
    except InvalidWheelFilename:
        return name


def compare_wheel_sets(a: Iterable[Path], b: Iterable[Path], *, label_a: str = "a", label_b: str = "b",
                       use_diffoscope: bool | None = None) -> ReproReport:
    """Compare wheels of `a` with the wheels of `b` of the same distribution name."""
    by_a = _by_key(a)
    by_b = _by_key(b)
    identical, differing = [], []
    for key in sorted(by_a.keys() & by_b.keys()):
        diff = compare_wheels(by_a[key], by_b[key], use_diffoscope=use_diffoscope)
        if diff is None:
            identical.append(by_a[key].name)
        else:
            differing.append(diff)
    return ReproReport(label_a=label_a, label_b=label_b, identical=tuple(identical), differing=tuple(differing),
                       only_a=tuple(sorted(by_a[k].name for k in by_a.keys() - by_b.keys())),
                       only_b=tuple(sorted(by_b[k].name for k in by_b.keys() - by_a.keys())))


def compare_with_hashes(expected: Mapping[str, str], rebuilt: Iterable[Path], *, label_a: str, label_b: str,
                        originals: Mapping[str, Path] | None = None,
                        use_diffoscope: bool | None = None) -> ReproReport:
    """Compare rebuilt wheels with recorded {wheel file: sha256}. Where the recorded wheel itself is at
    hand (`originals`, by file name), a differing pair gets the full per-file comparison."""
    originals = originals or {}
    by_key = _by_key(rebuilt)
    expected_by_key = {wheel_key(f): f for f in expected}
    identical, differing, notes = [], [], []
    for key in sorted(expected_by_key.keys() & by_key.keys()):
        file_a, path_b = expected_by_key[key], by_key[key]
        sha_b = sha256_file(path_b)
        if sha_b == expected[file_a] and file_a == path_b.name:
            identical.append(file_a)
            continue
        original = originals.get(file_a)
        if original is not None and original.is_file() and sha256_file(original) == expected[file_a]:
            diff = compare_wheels(original, path_b, use_diffoscope=use_diffoscope)
            if diff is not None:  # (the hashes differ, so the wheels do)
                differing.append(diff)
            continue
        if sha_b != expected[file_a]:
            notes.append(f"{file_a}: the recorded wheel is not at hand, so only its hash was compared")
        differing.append(WheelDiff(key=key, file_a=file_a, file_b=path_b.name, sha256_a=expected[file_a],
                                   sha256_b=sha_b,
                                   files=tuple(_name_diff(file_a, path_b.name))))
    return ReproReport(label_a=label_a, label_b=label_b, identical=tuple(identical), differing=tuple(differing),
                       only_a=tuple(sorted(expected_by_key[k] for k in expected_by_key.keys() - by_key.keys())),
                       only_b=tuple(sorted(by_key[k].name for k in by_key.keys() - expected_by_key.keys())),
                       notes=tuple(notes))


def compare_wheels(a: Path, b: Path, *, use_diffoscope: bool | None = None) -> WheelDiff | None:
    """None when the two wheels are byte-identical; otherwise what differs inside them."""
    sha_a, sha_b = sha256_file(a), sha256_file(b)
    if sha_a == sha_b and a.name == b.name:
        return None
    files = _name_diff(a.name, b.name) + (_entry_diffs(a, b) if sha_a != sha_b else [])
    report = run_diffoscope(a, b) if sha_a != sha_b and _want_diffoscope(use_diffoscope) else ""
    return WheelDiff(key=wheel_key(a), file_a=a.name, file_b=b.name, sha256_a=sha_a, sha256_b=sha_b,
                     files=tuple(files), diffoscope=report)


def _name_diff(name_a: str, name_b: str) -> list[FileDiff]:
    return [] if name_a == name_b else [FileDiff("(wheel file name)", "metadata", f"{name_a} vs {name_b}")]


def run_diffoscope(a: Path, b: Path) -> str:
    """diffoscope's text report for two files (exit 1 means "they differ", not a failure)."""
    done = run(["diffoscope", "--no-progress", "--text", "-", str(a), str(b)], capture=True, check=False,
               timeout=DIFFOSCOPE_TIMEOUT)
    if done.returncode not in (0, 1):
        return f"(diffoscope failed with exit code {done.returncode}: {done.stderr.strip()[-500:]})"
    return _clip(done.stdout.splitlines(), MAX_DIFF_LINES * 4)


def _want_diffoscope(use: bool | None) -> bool:
    return shutil.which("diffoscope") is not None if use is None else use


def _by_key(paths: Iterable[Path]) -> dict[str, Path]:
    return {wheel_key(p): Path(p) for p in paths}


def _entry_diffs(a: Path, b: Path) -> list[FileDiff]:
    with zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
        infos_a = {i.filename: i for i in za.infolist()}
        infos_b = {i.filename: i for i in zb.infolist()}
        diffs = [FileDiff(n, "only-in-a") for n in sorted(infos_a.keys() - infos_b.keys())]
        diffs += [FileDiff(n, "only-in-b") for n in sorted(infos_b.keys() - infos_a.keys())]
        for name in sorted(infos_a.keys() & infos_b.keys()):
            data_a, data_b = za.read(name), zb.read(name)
            if data_a != data_b:
                diffs.append(FileDiff(name, "changed", content_diff(name, data_a, data_b)))
        if not diffs:
            diffs = _metadata_diffs(za.infolist(), zb.infolist())
    return diffs


def _metadata_diffs(infos_a: list[zipfile.ZipInfo], infos_b: list[zipfile.ZipInfo]) -> list[FileDiff]:
    """Same contents, different bytes: say which archive metadata differs."""
    names_a, names_b = [i.filename for i in infos_a], [i.filename for i in infos_b]
    if names_a != names_b:
        return [FileDiff("(archive)", "metadata", "entry order differs:\n" + _unified(names_a, names_b))]
    out = []
    for ia, ib in zip(infos_a, infos_b, strict=False):
        what = []
        if ia.date_time != ib.date_time:
            what.append(f"timestamp {_fmt_time(ia.date_time)} vs {_fmt_time(ib.date_time)}")
        if ia.external_attr != ib.external_attr:
            what.append(f"mode {oct(ia.external_attr >> 16)} vs {oct(ib.external_attr >> 16)}")
        if (ia.compress_type, ia.compress_size) != (ib.compress_type, ib.compress_size):
            what.append(f"compression {ia.compress_type}/{ia.compress_size} bytes vs "
                        f"{ib.compress_type}/{ib.compress_size} bytes")
        if ia.extra != ib.extra:
            what.append("zip extra fields differ")
        if what:
            out.append(FileDiff(ia.filename, "metadata", "; ".join(what)))
    return out or [FileDiff("(archive)", "metadata", "the zip headers differ (same entries, same metadata)")]


def content_diff(name: str, a: bytes, b: bytes) -> str:
    """A unified diff when both sides are text, else differing offsets with hex context and strings."""
    text_a, text_b = _as_text(a), _as_text(b)
    if text_a is not None and text_b is not None:
        return _unified(text_a.splitlines(), text_b.splitlines(), name)
    return binary_diff(a, b)


def binary_diff(a: bytes, b: bytes) -> str:
    """A short description of how two binary entries differ: sizes, first differing offsets and strings."""
    lines = [f"binary: {len(a)} bytes vs {len(b)} bytes"]
    for offset in _differing_offsets(a, b):
        lines.append(f"  offset 0x{offset:08x}:")
        lines.append(f"    a: {_hex(a, offset)}")
        lines.append(f"    b: {_hex(b, offset)}")
    strings_a, strings_b = set(_STRINGS.findall(a)), set(_STRINGS.findall(b))
    for label, only in (("only in a", strings_a - strings_b), ("only in b", strings_b - strings_a)):
        shown = sorted(only)[:MAX_STRINGS]
        if shown:
            lines.append(f"  strings {label}: " + ", ".join(repr(s.decode("ascii")) for s in shown)
                         + (" ..." if len(only) > MAX_STRINGS else ""))
    return "\n".join(lines)


def _differing_offsets(a: bytes, b: bytes) -> list[int]:
    """Start offsets of the first few runs of differing bytes (a length change counts at the end)."""
    offsets: list[int] = []
    i, n = 0, min(len(a), len(b))
    while i < n and len(offsets) < MAX_OFFSETS:
        if a[i] != b[i]:
            offsets.append(i)
            while i < n and a[i] != b[i]:
                i += 1
            i += CONTEXT_BYTES  # the next run must be clearly separate
        else:
            i += 1
    if len(a) != len(b) and len(offsets) < MAX_OFFSETS:
        offsets.append(n)
    return offsets


def _hex(data: bytes, offset: int) -> str:
    start = max(0, offset - CONTEXT_BYTES // 2)
    chunk = data[start:start + CONTEXT_BYTES]
    text = "".join(chr(c) if 0x20 <= c < 0x7F else "." for c in chunk)
    return f"{chunk.hex(' ')}  |{text}|" if chunk else "(end of file)"


def _as_text(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _unified(a: list[str], b: list[str], name: str = "") -> str:
    lines = list(difflib.unified_diff(a, b, f"a/{name}", f"b/{name}", lineterm="", n=2))
    return _clip(lines, MAX_DIFF_LINES)


def _clip(lines: list[str], limit: int) -> str:
    if len(lines) > limit:
        lines = [*lines[:limit], f"... ({len(lines) - limit} more lines)"]
    return "\n".join(lines)


def _fmt_time(dt: tuple[int, ...]) -> str:
    return "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}".format(*dt)


def format_report(report: ReproReport) -> str:
    """What a person reads: one line per wheel, and for a difference the files and their diffs."""
    if report.ok:
        return f"reproducible: {len(report.identical)} wheel(s) identical in {report.label_a} and {report.label_b}"
    lines = [f"NOT reproducible: {report.label_a} vs {report.label_b}"]
    lines += [f"  identical: {name}" for name in report.identical]
    lines += [f"  only in {report.label_a}: {name}" for name in report.only_a]
    lines += [f"  only in {report.label_b}: {name}" for name in report.only_b]
    for d in report.differing:
        names = d.file_a if d.file_a == d.file_b else f"{d.file_a} vs {d.file_b}"
        lines.append(f"  DIFFERS: {names} (sha256 {d.sha256_a[:12]} vs {d.sha256_b[:12]})")
        for f in d.files:
            lines.append(f"    {f.change}: {f.path}")
            lines += [f"      {line}" for line in f.detail.splitlines()]
        if d.diffoscope:
            lines.append("    diffoscope:")
            lines += [f"      {line}" for line in d.diffoscope.splitlines()]
    lines += [f"  note: {n}" for n in report.notes]
    return "\n".join(lines)
