"""Prebuilt components: a released wheel taken instead of a build (`prebuilt = ...` in a recipe, or a
bisect step whose commit has a wheel in the component's `prebuilt-index`).

The file is pinned (`PrebuiltFile`: URL and sha256), downloaded once into the wheel cache under a key made of
its sha256 (so it is cached, served and checked like a built wheel), and refused when it does not hash as
pinned. Nothing is compiled for it."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

from toolchain.build.cache import CacheEntry, WheelCache
from toolchain.build.entry import EntryMeta
from toolchain.core.checks import NAME, SHA256, STR
from toolchain.core.fs import sha256_bytes, sha256_file
from toolchain.core.record import field, record
from toolchain.core.redact import redact_text
from toolchain.core.regex import SHA256_HEX, Regex
from toolchain.core.serial import meta, to_table
from toolchain.errors import BuildError, TransientError

DOWNLOAD_TIMEOUT = 60  # seconds without data before a download is given up
CHUNK = 1 << 20


@record
class PrebuiltFile:
    """One pinned wheel file: where it is, its sha256, and what pinned it (the recipe's requirement and the
    index that served it, or the recipe's own URL)."""
    file: str = field(metadata=meta(skip=True))  # a lock and the cache keep it beside this table
    url: str = field(metadata=meta(dump=redact_text, check=NAME))
    sha256: str = field(metadata=meta(check=SHA256))
    size: int = field(default=0, metadata=meta(skip=True))
    # "vllm-xpu-kernels==0.1.16.2" ("": the recipe named the URL)
    requirement: str = field(default="", metadata=meta(omit_default=True, check=STR))
    # the index or find-links location that served it
    index: str = field(default="", metadata=meta(omit_default=True, dump=redact_text, check=STR))


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
                                 f"sha256 {got}, the pin says {pf.sha256}", hint=_mismatch_hint(pf, got))
            cache.put(key, wheel, EntryMeta(component=what, prebuilt=to_table(pf)), log=log)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        entry = cache.take(key, dest_dir)
        if entry is None:
            raise BuildError(f"{what}: the prebuilt wheel just stored in the cache under {key} could not be read "
                             "back", hint="check the cache directory's disk")
        return entry, True


def _mismatch_hint(pf: PrebuiltFile, got: str) -> str:
    """What a prebuilt that does not hash as pinned most likely means: a sha256 the user typed into the recipe
    (`prebuilt = {url, sha256}`) is likelier mistyped than the file changed; one the tool pinned from an index
    was right when pinned, so the file changed where it is served."""
    if not pf.requirement:
        return (f"nothing was cached or installed. The sha256 is the recipe's own (prebuilt = {{url, sha256}}): a "
                f"mistyped or stale pin is likelier than a changed file. Check it (`sha256sum` of the file you "
                f"mean); if {pf.file} with sha256 {got} is the wheel you want, write that sha256 in the recipe")
    return ("the file was changed or replaced where it is served since it was pinned; nothing was cached or "
            "installed. Check where it comes from; if the new file is the one you want, pin it again "
            "(`toolchain lock --refresh`, or a rebuild from the recipe)")


def download(url: str, dest: Path, what: str) -> None:
    """`url` (http(s), file:// or a local path) into `dest`, streamed; a failure names the URL (redacted)."""
    import urllib.error  # here, not at the top: a warm build must not import http.client, socket and ssl
    import urllib.request

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
    except ValueError as exc:  # not a URL urllib can open
        raise BuildError(f"{what}: cannot download the prebuilt wheel {redact_text(url)}: {exc}",
                         hint="give an http(s):// or file:// URL, or a path") from None
    except FileNotFoundError:
        raise BuildError(f"{what}: the prebuilt wheel {redact_text(url)} does not exist",
                         hint="check the path in the recipe or the index") from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise TransientError(f"{what}: no space left on device for the prebuilt wheel ({dest.parent})",
                                 kind="disk-full", hint="free space there (or point --cache-dir at a larger disk) "
                                                        "and run the same command again") from None
        raise TransientError(f"{what}: cannot download the prebuilt wheel {redact_text(url)}: {exc}",
                             kind="network", hint="check the network (a proxy: HTTPS_PROXY) and run again; the "
                                                  "file is pinned, so any copy with the same sha256 serves") from None


# ---- per-commit wheels (`prebuilt-index`): a bisect step whose commit has one takes it ------------------

COMMIT_LABEL = Regex(r"^g([0-9a-f]{7,40})$")  # setuptools-scm / vLLM local versions: 1.2.3.dev4+g1a2b3c4


def commit_wheel(index: str, dist: str, commit: str, what: str) -> PrebuiltFile | None:
    """The wheel of `dist` whose local version names `commit` (`+g<hex>`, hex a prefix of it) in `index`: a
    PEP 503 index (`<index>/<dist>/`), a find-links HTML page, or a folder (a path or file://). Only a file
    whose sha256 is known (the page's #sha256= fragment, or a local file) is taken. None when there is none."""
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    want = canonicalize_name(dist)
    for file, url, sha in _index_files(index, str(want), what):
        try:
            name, version, _, _ = parse_wheel_filename(file)
        except InvalidWheelFilename:
            continue
        labels = (version.local or "").split(".")
        if name == want and any((m := COMMIT_LABEL.match(label)) and commit.startswith(m.group(1))
                                for label in labels):
            if not sha and url.startswith("file:"):
                sha = sha256_file(Path(unquote(urlparse(url).path)))
            if sha:
                return PrebuiltFile(file, url, sha, index=index)
    return None


def _index_files(index: str, dist: str, what: str) -> list[tuple[str, str, str]]:
    """(file name, URL, sha256 or "") of every wheel `index` lists for `dist`."""
    parsed = urlparse(index)
    if parsed.scheme in ("", "file"):
        folder = Path(unquote(parsed.path) if parsed.scheme else index)
        if not folder.is_dir():
            raise BuildError(f"{what}: prebuilt-index {index} is not a folder",
                             hint="give a PEP 503 index URL, a find-links page or a folder of wheels")
        return [(w.name, w.resolve().as_uri(), "") for w in sorted(folder.glob("*.whl"))]
    import requests
    from pypi_simple import ACCEPT_ANY, NoSuchProjectError, ProjectPage, PyPISimple, UnsupportedContentTypeError

    page = index
    try:
        with PyPISimple(endpoint=index) as client:  # credentials: in the URL, or ~/.netrc (requests reads it)
            client.s.headers["User-Agent"] = "xpu-toolchain"
            try:  # a PEP 503 / PEP 691 index: the project's page (HTML or JSON, as the index serves)
                page = client.get_project_url(dist)
                project = client.get_project_page(dist, timeout=DOWNLOAD_TIMEOUT)
            except NoSuchProjectError:  # else a find-links page: its links are the files
                page = index
                r = client.s.get(index, timeout=DOWNLOAD_TIMEOUT, headers={"Accept": ACCEPT_ANY})
                if r.status_code == 404:
                    return []
                r.raise_for_status()
                project = ProjectPage.from_response(r, dist)
    except requests.HTTPError as exc:
        code = exc.response.status_code if exc.response is not None else "?"
        raise BuildError(f"{what}: prebuilt-index {redact_text(page)} answered HTTP {code}",
                         hint="check the URL and its credentials (~/.netrc)") from None
    except UnsupportedContentTypeError as exc:
        raise BuildError(f"{what}: prebuilt-index {redact_text(page)} is not an index page: {exc}",
                         hint="give a PEP 503 index URL, a find-links page or a folder of wheels") from None
    except (requests.RequestException, OSError, ValueError) as exc:
        raise TransientError(f"{what}: cannot read prebuilt-index {redact_text(page)}: {redact_text(str(exc))}",
                             kind="network", hint="check the network and run again") from None
    return [(pkg.filename, pkg.url, sha if SHA256_HEX.match(sha := pkg.digests.get("sha256", "")) else "")
            for pkg in project.packages if pkg.package_type == "wheel"]
