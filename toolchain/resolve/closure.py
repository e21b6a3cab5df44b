"""The resolved closure as data: what `stack.lock.toml` records under `[resolve]` and `[[dependencies]]`, and
what `pylock.toml` lists after the built wheels (PEP 751 packages with the exact wheel, its URL and sha256)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

from toolchain.core.checks import DIST_FILE, NAME, SHA256, SIZE, STR, STRS
from toolchain.core.places import local_url, portable_url
from toolchain.core.record import field, record
from toolchain.core.redact import redact_url
from toolchain.core.serial import Data, from_data, meta, to_table


def canonical_name(name: str) -> str:
    """PEP 503's normalized name (packaging's canonicalize_name, without importing packaging: its utils bring
    in the tags machinery, sysconfig and platform, tens of ms on every build that takes a kept closure)."""
    name = name.replace("_", "-").replace(".", "-")  # (re.sub(r"[-_.]+", "-", name) without a pattern to compile)
    while "--" in name:
        name = name.replace("--", "-")
    return name.lower()


DEPS_DIR = "wheels/deps"  # beside a lock: the fetched (or, in a bundle made --with-deps, bundled) dependency files


def _redact_urls(urls: Iterable[str]) -> Data:
    return [redact_url(u) for u in urls]


@record(kw_only=True)
class LockedDist:
    """One resolved distribution: the exact file (a wheel, or an sdist when the index has no wheel)."""
    name: str = field(metadata=meta(check=NAME))  # canonical name
    version: str = field(metadata=meta(check=NAME))
    file: str = field(metadata=meta(check=DIST_FILE))  # file name
    # where the file is: https://... or file:///... (in a lock, one of the demo's shipped files as {demo}/...)
    url: str = field(metadata=meta(dump=redact_url, check=NAME, portable=lambda v, _: portable_url(v),
                                   load=local_url))
    sha256: str = field(metadata=meta(check=SHA256))
    size: int = field(default=0, metadata=meta(check=SIZE))
    # the index or find-links location it came from
    index: str = field(default="", metadata=meta(dump=redact_url, check=STR))
    # the distributions that asked for it (built ones included)
    required_by: tuple[str, ...] = field(default=(), metadata=meta(check=STRS))

    @property
    def is_wheel(self) -> bool:
        """Whether the locked file is a wheel (not a source distribution)."""
        return self.file.endswith(".whl")

    def local_path(self) -> str:
        """The path of a file:// URL ("" for a remote one)."""
        parsed = urlparse(self.url)
        return unquote(parsed.path) if parsed.scheme == "file" else ""


@record(kw_only=True)
class Closure:
    """How the closure was resolved and what it holds (install order does not matter: all --no-deps). Every
    setting may be missing from a lock's `[resolve]` (lock.RESOLVE_SCHEMA): each has its default."""
    resolver: str = field(default="", metadata=meta(check=STR))  # e.g. "uv 0.13.9"
    indexes: tuple[str, ...] = field(default=(), metadata=meta(dump=_redact_urls, check=STRS))
    find_links: tuple[str, ...] = field(default=(), metadata=meta(dump=_redact_urls, check=STRS))
    index_strategy: str = field(default="", metadata=meta(check=STR))
    python_version: str = field(default="", metadata=meta(check=STR))
    platform: str = field(default="", metadata=meta(check=STR))
    # written apart from the settings: the lock's [[dependencies]], a memo entry's "dependencies"
    dists: tuple[LockedDist, ...] = field(default=(), metadata=meta(skip=True))
    # requirements on built distributions the built version does not meet
    notes: tuple[str, ...] = field(default=(), metadata=meta(check=STRS))
    # when the resolver ran (UTC, ISO 8601); "" when nothing needed resolving: the build record's, not the lock's
    resolved_at: str = field(default="", metadata=meta(omit_default=True, check=STR, record=True))

    def dist(self, name: str) -> LockedDist | None:
        """The locked distribution `name` (compared canonically), None when the closure has none."""
        want = canonical_name(name)
        return next((d for d in self.dists if d.name == want), None)

    def settings(self) -> dict[str, Data]:
        """The `[resolve]` table (the dists go apart: `[[dependencies]]`, each `to_table(dist, kebab=True)`)."""
        return to_table(self, kebab=True)

    @classmethod
    def from_toml(cls, settings: Mapping[str, Any], dists: Iterable[Mapping[str, Any]]) -> Closure:
        """The closure of a `[resolve]` table and its `[[dependencies]]`."""
        return from_data(cls, settings, kebab=True,
                         given={"dists": tuple(from_data(LockedDist, d, kebab=True) for d in dists)})


def pylock_entry(d: LockedDist, *, bundled: bool = False) -> dict[str, Any]:
    """PEP 751 `[[packages]]` entry of a dependency: the one file, by URL (or by `deps/` path in a bundle)."""
    where: dict[str, Any] = {"name": d.file}
    if bundled:
        where["path"] = f"{DEPS_DIR}/{d.file}"
    else:
        where["url"] = redact_url(d.url)
    if d.size:
        where["size"] = d.size
    where["hashes"] = {"sha256": d.sha256}
    entry: dict[str, Any] = {"name": d.name, "version": d.version}
    if d.index and "://" in d.index and not d.index.startswith("file:"):
        entry["index"] = redact_url(d.index)
    entry["wheels" if d.is_wheel else "sdist"] = [where] if d.is_wheel else where
    entry["tool"] = {"toolchain": {"role": "dependency", "required-by": list(d.required_by)}}
    return entry


def file_name(url: str) -> str:
    """The file name at the end of a URL's path, percent-decoded."""
    return unquote(PurePosixPath(urlparse(url).path).name)
