"""The remote wheel cache a build uses: entries of the local wheel cache (build/cache.py) fetched from and pushed
to an OCI registry through the one registry client (sharing/registry.py).

Reading: a local miss asks the registry for the key. A hit downloads every part into a temporary directory
under the cache (each blob checked against its digest and size while it streams), checks the wheel's sha256
against the entry's metadata and the manifest, and only then puts it into the local cache, which publishes
by rename: a local entry is whole or absent, whatever happens to the registry or to this process.
Pushing: only when asked (`--push`, `[cache] push = true`); the manifest goes last, so a tag never names a
half-uploaded entry, and a key the registry already holds is not pushed again.

The registry is an accelerator, never a dependency. Every request is bounded (connect and read timeouts) and
tried once; the first failure (down, slow, credentials refused, a plain-HTTP host not opted in) prints ONE
warning and turns the remote off for the rest of the process, and the build goes on locally. An entry that
fails verification is refused (a warning naming it) and built locally.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from toolchain import __version__
from toolchain.build.cache import CacheEntry, WheelCache
from toolchain.build.entry import entry_problem, read_entry
from toolchain.core.record import replace
from toolchain.core.redact import redact_url
from toolchain.core.regex import Regex
from toolchain.sharing.registry import (
    ARTIFACT_TYPE,
    CREATED,
    MT_LOG,
    MT_META,
    MT_WHEEL,
    TITLE,
    A,
    Refused,
    Registry,
    RemoteError,
)
from toolchain.sharing.settings import RemoteSettings

if TYPE_CHECKING:
    from toolchain.build.plan import ComponentPlan, Plan
    from toolchain.console import UI

PREFETCH_JOBS = 4  # downloads at once
MAX_META, MAX_LOG = 4 << 20, 256 << 20
WHEEL_NAME = Regex(r"^[A-Za-z0-9_.+!-]+\.whl$")


class RemoteCache:
    """The remote behind one process's builds (shared by bisect's threads: `shared()`). Never raises: a
    problem is one warning, after which the remote is off (reads and pushes, or pushes only when just the
    push was refused); a refused entry is a warning that names it."""

    _shared: ClassVar[dict[RemoteSettings, RemoteCache]] = {}
    _shared_lock = threading.Lock()

    def __init__(self, settings: RemoteSettings) -> None:
        self.settings = settings
        self._registry_made: Registry | None = None
        self._lock = threading.Lock()
        self.off: str | None = None          # why reads (and pushes) stopped
        self.push_off: str | None = None     # why pushes stopped
        self.warnings: list[str] = []
        self.pushed: list[str] = []
        self.downloaded: list[str] = []

    @classmethod
    def shared(cls, settings: RemoteSettings) -> RemoteCache:
        """The one RemoteCache of these settings in this process (made on first use)."""
        with cls._shared_lock:
            if settings not in cls._shared:
                cls._shared[settings] = cls(settings)
            return cls._shared[settings]

    @property
    def push_enabled(self) -> bool:
        """Whether this machine pushes what it builds (asked to, and pushing has not been turned off by a failure)."""
        return self.settings.push and self.off is None and self.push_off is None

    def warm_up(self) -> None:
        """Make the client (imports requests, reads the auth files) in the background while the build plans:
        a build whose wheels all come from the registry should not wait for that at its first download."""
        def make() -> None:
            with contextlib.suppress(Exception):  # any problem shows, once, at the first real request
                self._registry()

        if self.off is None and self._registry_made is None:
            threading.Thread(target=make, name="remote-cache-warm-up", daemon=True).start()

    def _registry(self) -> Registry:
        """One client for the process's threads (a requests Session's connection pool is thread-safe)."""
        with self._lock:
            if self._registry_made is None:
                self._registry_made = Registry(self.settings)
            return self._registry_made

    def _warn(self, ui: UI, message: str) -> None:
        self.warnings.append(message)
        ui.warn(message)

    def _turn_off(self, ui: UI, err: RemoteError, *, push_only: bool = False) -> None:
        with self._lock:
            if self.off is not None or (push_only and self.push_off is not None):
                return
            if push_only:
                self.push_off = str(err)
                what = "not pushing to it"
            else:
                self.off = str(err)
                what = "building locally without it"
        tip = f" ({err.hint})" if err.hint else ""
        self._warn(ui, f"remote cache {self.settings.url}: {err}; {what} for the rest of this run{tip}")

    def fetch(self, key: str, name: str, cache: WheelCache, work: Path, ui: UI) -> CacheEntry | None:
        """The entry for `key` from the registry, verified and put into the local cache; None on a miss,
        a refused entry or a registry problem (the caller builds)."""
        if self.off is not None:
            return None
        tmp = work / f"{key}-remote-{os.urandom(4).hex()}"  # under the build's stale-leftover sweep
        try:
            reg = self._registry()
            got = reg.manifest(key)
            if got is None:
                return None
            manifest, digest = got
            ui.step(f"downloading {name} ({key[:12]}) from {self.settings.url}")
            tmp.mkdir(parents=True)
            entry = _install(reg, key, manifest, digest, cache, tmp)
            self.downloaded.append(key)
            return entry
        except Refused as err:
            self._warn(ui, f"remote cache {self.settings.url}: refused the entry for {name} ({key}): {err}; "
                           f"building it locally")
            return None
        except RemoteError as err:
            self._turn_off(ui, err)
            return None
        except _NONSENSE as exc:  # an answer no check above foresaw: the remote is off, never a traceback
            self._turn_off(ui, RemoteError(f"answered something this client cannot use while fetching {name} "
                                           f"({type(exc).__name__})"))
            return None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def push(self, entry: CacheEntry, annotations: dict[str, str], name: str, work: Path, ui: UI) -> bool:
        """Upload a local entry unless the registry holds its key; True when pushed."""
        if not self.push_enabled:
            return False
        files = [(entry.wheel, MT_WHEEL), (entry.wheel.parent / "entry.json", MT_META)]
        if (entry.wheel.parent / "build.log").is_file():
            files.append((entry.wheel.parent / "build.log", MT_LOG))
        try:
            reg = self._registry()
            if reg.exists(entry.key):
                return False
            ui.step(f"pushing {name} ({entry.key[:12]}) to {self.settings.url}")
            reg.push(entry.key, files, annotations, work)
        except RemoteError as err:
            refused = "credentials" in str(err) or "HTTP 403" in str(err) or "HTTP 401" in str(err)
            self._turn_off(ui, err, push_only=refused)
            return False
        self.pushed.append(entry.key)
        return True

    def prefetch(self, wanted: list[tuple[str, str]], cache: WheelCache, work: Path, ui: UI) -> dict[str, bool]:
        """Look up and download several (key, name) at once (a build's local misses, before its first
        component builds: wheels download side by side). key -> True (now in the local cache) or False (the
        registry has no usable entry). Each key is fetched holding its build lock, like a build."""
        from concurrent.futures import ThreadPoolExecutor

        if self.off is not None or not wanted:
            return {}

        def one(item: tuple[str, str]) -> bool | None:
            key, name = item
            with cache.building(key):
                if cache.get(key) is not None:
                    return None  # another builder put it there meanwhile
                return self.fetch(key, name, cache, work, ui) is not None

        with ThreadPoolExecutor(max_workers=min(PREFETCH_JOBS, len(wanted))) as pool:
            found = dict(zip((k for k, _ in wanted), pool.map(one, wanted), strict=False))
        return {k: v for k, v in found.items() if v is not None and (v or self.off is None)}

    def summary(self) -> dict[str, Any]:
        """What the remote cache did in this build, for the JSON report: downloads, pushes, warnings."""
        return {"url": self.settings.url, "push": self.settings.push, "off": self.off, "push-off": self.push_off,
                "downloaded": list(self.downloaded), "pushed": list(self.pushed), "warnings": list(self.warnings)}


def _install(reg: Registry, key: str, manifest: dict[str, Any], digest: str, cache: WheelCache,
             tmp: Path) -> CacheEntry:
    """Download, verify, then put into the local cache (atomic there). Raises Refused for a bad entry."""
    if manifest.get("artifactType") != ARTIFACT_TYPE:
        raise Refused(f"the artifact tagged {key} is not a toolchain cache entry (artifactType "
                      f"{_shown(manifest.get('artifactType'))})")
    annotations = manifest.get("annotations") or {}
    if not isinstance(annotations, dict):
        raise Refused(f"its annotations are a {type(annotations).__name__}, not an object")
    if annotations.get(A + "cache-key") != key:
        raise Refused(f"the artifact tagged {key} says it is the entry of {_shown(annotations.get(A + 'cache-key'))}")
    listed = manifest.get("layers") or []
    if not isinstance(listed, list):
        raise Refused(f"its layers are a {type(listed).__name__}, not a list")
    layers: dict[str, dict[str, Any]] = {}
    for layer in listed:
        if isinstance(layer, dict) and layer.get("mediaType") in (MT_WHEEL, MT_META, MT_LOG):
            if layer["mediaType"] in layers:
                raise Refused(f"two {layer['mediaType']} layers")
            layers[layer["mediaType"]] = layer
    if MT_WHEEL not in layers or MT_META not in layers:
        raise Refused("the artifact lacks its wheel or its metadata layer")
    reg.blob_to(layers[MT_META], tmp / "entry.json", MAX_META)
    try:
        meta = json.loads((tmp / "entry.json").read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise Refused("its metadata is not JSON") from None
    if not isinstance(meta, dict):
        raise Refused("its metadata is not a JSON object")
    problem = entry_problem(meta, whole=False)
    if problem:
        raise Refused(f"its metadata {problem}")
    name, sha, size = meta.get("wheel"), meta.get("sha256"), meta.get("size")
    wheel_annotations = layers[MT_WHEEL].get("annotations") or {}
    title = wheel_annotations.get(TITLE) if isinstance(wheel_annotations, dict) else None
    if not isinstance(name, str) or not WHEEL_NAME.match(name) or title != name:
        raise Refused(f"its metadata names the wheel {_shown(name)}, the layer {_shown(title)}")
    if layers[MT_WHEEL].get("digest") != f"sha256:{sha}" or layers[MT_WHEEL].get("size") != size \
            or annotations.get(A + "wheel.sha256") != sha:
        raise Refused(f"the wheel layer ({_shown(layers[MT_WHEEL].get('digest'))}) is not the wheel its metadata "
                      f"records (sha256:{sha}, {size} bytes)")
    wheel = tmp / name
    reg.blob_to(layers[MT_WHEEL], wheel, layers[MT_WHEEL]["size"])  # checks the bytes against sha256 `sha` as they stream
    log = None
    if MT_LOG in layers:
        log = tmp / "build.log"
        try:
            reg.blob_to(layers[MT_LOG], log, MAX_LOG)
        except Refused:
            log = None  # a bad log costs the log, not the wheel
    kept = replace(read_entry(meta), remote={"url": reg.settings.url, "digest": digest,
                                                         "downloaded": time.time()})
    entry = cache.put(key, wheel, kept, log=log)  # (put writes its own wheel, sha256, size and stored)
    if entry.sha256 != sha:  # put re-hashes its own copy: a disk that changed it is caught too
        cache.evict(key)
        raise Refused(f"the local copy of {name} has sha256 {entry.sha256}, the entry records {sha}")
    return entry


def _shown(value: object) -> str:
    """A value from the registry, for a message: repr, cut short."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# what a registry's unforeseen answer raises in this client's parsing (never a ToolError, never an OSError)
_NONSENSE = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, UnicodeError)


def entry_annotations(plan: Plan, cp: ComponentPlan, entry: CacheEntry) -> dict[str, str]:
    """What `cache ls --remote` shows without downloading: manifest annotations (strings)."""
    comp = cp.component
    tc = plan.toolchain
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(entry.meta.stored or time.time()))
    return {
        CREATED: created,
        A + "cache-key": cp.cache_key,
        A + "component": comp.name,
        A + "url": redact_url(comp.url),
        A + "commit": comp.commit,
        A + "describe": entry.meta.describe,
        A + "subdir": comp.subdir,
        A + "patches": ",".join(p.sha256 for p in cp.patches),
        A + "wheel": entry.wheel.name,
        A + "wheel.sha256": entry.sha256,
        A + "wheel.size": str(entry.size),
        A + "toolchain": json.dumps({"oneapi-version": tc.oneapi_version, "cmplr-root": tc.cmplr_root,
                                     "env-sha256": tc.env_diff_sha256}, sort_keys=True),
        A + "target": json.dumps(plan.target.fingerprint(), sort_keys=True),
        A + "tool-version": __version__,
    }


__all__ = ["RemoteCache", "entry_annotations"]
