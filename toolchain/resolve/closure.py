"""The resolved closure as data: what `stack.lock.toml` records under `[resolve]` and `[[dependencies]]`, and
what `pylock.toml` lists after the built wheels (PEP 751 packages with the exact wheel, its URL and sha256)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

from toolchain.core.redact import redact_url

DEPS_DIR = "wheels/deps"  # beside a lock: the fetched (or, in a bundle made --with-deps, bundled) dependency files


@dataclass(frozen=True)
class LockedDist:
    """One resolved distribution: the exact file (a wheel, or an sdist when the index has no wheel)."""
    name: str                         # canonical name
    version: str
    file: str                         # file name
    url: str                          # where the file is: https://... or file:///...
    sha256: str
    size: int = 0
    index: str = ""                   # the index or find-links location it came from
    required_by: tuple[str, ...] = ()  # the distributions that asked for it (built ones included)

    @property
    def is_wheel(self) -> bool:
        return self.file.endswith(".whl")

    def local_path(self) -> str:
        """The path of a file:// URL ("" for a remote one)."""
        parsed = urlparse(self.url)
        return unquote(parsed.path) if parsed.scheme == "file" else ""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "version": self.version, "file": self.file,
                             "url": redact_url(self.url), "sha256": self.sha256, "size": self.size,
                             "index": redact_url(self.index),
                             "required-by": list(self.required_by)}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LockedDist:
        return cls(name=str(d["name"]), version=str(d["version"]), file=str(d["file"]), url=str(d["url"]),
                   sha256=str(d["sha256"]), size=int(d.get("size", 0)), index=str(d.get("index", "")),
                   required_by=tuple(d.get("required-by", ())))


@dataclass(frozen=True)
class Closure:
    """How the closure was resolved and what it holds (install order does not matter: all --no-deps)."""
    resolver: str                     # e.g. "uv 0.13.9"
    indexes: tuple[str, ...]
    find_links: tuple[str, ...]
    index_strategy: str
    python_version: str
    platform: str
    dists: tuple[LockedDist, ...]
    notes: tuple[str, ...] = ()       # requirements on built distributions the built version does not meet
    resolved_at: str = ""             # when the resolver ran (UTC, ISO 8601); "" when nothing needed resolving

    def dist(self, name: str) -> LockedDist | None:
        from packaging.utils import canonicalize_name

        want = canonicalize_name(name)
        return next((d for d in self.dists if d.name == want), None)

    def settings(self) -> dict[str, Any]:
        return {"resolver": self.resolver, "indexes": [redact_url(i) for i in self.indexes],
                "find-links": [redact_url(f) for f in self.find_links],
                "index-strategy": self.index_strategy, "python-version": self.python_version,
                "platform": self.platform, "notes": list(self.notes)} | (
            {"resolved-at": self.resolved_at} if self.resolved_at else {})

    @classmethod
    def from_toml(cls, settings: dict[str, Any], dists: list[dict[str, Any]]) -> Closure:
        return cls(resolver=str(settings.get("resolver", "")), indexes=tuple(settings.get("indexes", ())),
                   find_links=tuple(settings.get("find-links", ())),
                   index_strategy=str(settings.get("index-strategy", "")),
                   python_version=str(settings.get("python-version", "")),
                   platform=str(settings.get("platform", "")), notes=tuple(settings.get("notes", ())),
                   resolved_at=str(settings.get("resolved-at", "")),
                   dists=tuple(LockedDist.from_dict(d) for d in dists))


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
    return unquote(PurePosixPath(urlparse(url).path).name)
