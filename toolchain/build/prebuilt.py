"""Prebuilt components: a released wheel taken instead of a build (`prebuilt = ...` in a recipe, or a
bisect step whose commit has a wheel in the component's `prebuilt-index`).

The file is pinned (`PrebuiltFile`: URL and sha256), downloaded once into the wheel cache under a key made of
its sha256 (so it is cached, served and checked like a built wheel), and refused when it does not hash as
pinned. Nothing is compiled for it."""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from toolchain.build.cache import CacheEntry, WheelCache
from toolchain.core.fs import sha256_bytes, sha256_file
from toolchain.core.redact import redact_text
from toolchain.errors import BuildError, TransientError

DOWNLOAD_TIMEOUT = 60  # seconds without data before a download is given up
CHUNK = 1 << 20


@dataclass(frozen=True)
class PrebuiltFile:
    """One pinned wheel file: where it is, its sha256, and what pinned it (the recipe's requirement and the
    index that served it, or the recipe's own URL)."""
    file: str
    url: str
    sha256: str
    size: int = 0
    requirement: str = ""  # "vllm-xpu-kernels==0.1.16.2" ("": the recipe named the URL)
    index: str = ""        # the index or find-links location that served it

    def as_dict(self) -> dict[str, str | int]:
        d: dict[str, str | int] = {"url": redact_text(self.url), "sha256": self.sha256}
        if self.requirement:
            d["requirement"] = self.requirement
        if self.index:
            d["index"] = redact_text(self.index)
        return d


def prebuilt_key(sha256: str) -> str:
    """The wheel cache key of a prebuilt file: its content (the same file from any URL is one entry)."""
    return sha256_bytes(json.dumps({"prebuilt": sha256}).encode())[:32]


def take_prebuilt(pf: PrebuiltFile, cache: WheelCache, dest_dir: Path, work: Path, what: str,
                  log: Path | None = None) -> tuple[CacheEntry, bool]:
    """The pinned wheel in `dest_dir`, from the cache or downloaded into it first (checked against the pinned
    sha256 both ways); returns the entry and whether it was downloaded now. A file that does not hash as
    pinned is refused (BuildError) and never cached."""
    key = prebuilt_key(pf.sha256)
    entry = cache.take(key, dest_dir)
    if entry is not None:
        return entry, False
    with cache.building(key):
        entry = cache.take(key, dest_dir)
        if entry is not None:
            return entry, False
        work.mkdir(parents=True, exist_ok=True)
        tmp = work / f"prebuilt-{key}-{os.urandom(4).hex()}"
        tmp.mkdir()
        try:
            wheel = tmp / pf.file
            download(pf.url, wheel, what)
            got = sha256_file(wheel)
            if got != pf.sha256:
                raise BuildError(f"{what}: refused the prebuilt wheel {pf.file} from {redact_text(pf.url)}: it has "
                                 f"sha256 {got}, the pin says {pf.sha256}",
                                 hint="the file was changed or replaced where it is served; nothing was cached "
                                      "or installed. Check where it comes from; if the new file is the one you "
                                      "want, pin its sha256 (`toolchain lock` or the recipe)")
            cache.put(key, wheel, {"component": what, "prebuilt": pf.as_dict(), "build_seconds": 0.0}, log=log)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        entry = cache.take(key, dest_dir)
        if entry is None:
            raise BuildError(f"{what}: the prebuilt wheel just stored in the cache under {key} could not be read "
                             "back", hint="check the cache directory's disk")
        return entry, True


def download(url: str, dest: Path, what: str) -> None:
    """`url` (http(s), file:// or a local path) into `dest`, streamed; a failure names the URL (redacted)."""
    parsed = urlparse(url)
    try:
        if parsed.scheme in ("", "file"):
            shutil.copyfile(unquote(parsed.path) if parsed.scheme else url, dest)
            return
        request = urllib.request.Request(url, headers={"User-Agent": "xpu-toolchain"})
        with urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT) as response, open(dest, "wb") as f:
            shutil.copyfileobj(response, f, CHUNK)
    except urllib.error.HTTPError as exc:  # the server answered: the URL is wrong or gone
        raise BuildError(f"{what}: cannot download the prebuilt wheel {redact_text(url)}: HTTP {exc.code}",
                         hint="check the URL (the file is pinned: any copy with the same sha256 serves)") from None
    except FileNotFoundError:
        raise BuildError(f"{what}: the prebuilt wheel {redact_text(url)} does not exist",
                         hint="check the path in the recipe or the index") from None
    except (OSError, ValueError) as exc:
        raise TransientError(f"{what}: cannot download the prebuilt wheel {redact_text(url)}: {exc}",
                             kind="network", hint="check the network (a proxy: HTTPS_PROXY) and run again; the "
                                                  "file is pinned, so any copy with the same sha256 serves") from None
