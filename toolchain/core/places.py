"""Where this machine keeps a thing, as a lock writes it: paths under the tool's own shipped files (the demo's
sources, its wheelhouse, its stand-in oneAPI) spelled `{demo}/...`, found again wherever the tool is installed
(`[resolve] find-links` spells the demo's wheelhouse so); an interpreter by its command name. The build record
beside a lock keeps the paths as they were (`core.serial`'s `portable=`)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

DEMO_PLACE = "{demo}"
DEMO = Path(__file__).resolve().parents[1] / "demo_src"  # (toolchain.sources.demo.SRC)


def portable_path(path: str) -> str:
    """A path under the demo's shipped files as `{demo}/...`; any other as it is."""
    p = Path(path)
    if p.is_absolute() and p.is_relative_to(DEMO):
        return DEMO_PLACE + p.as_posix()[len(DEMO.as_posix()):]
    return path


def portable_url(url: str) -> str:
    """A file:// URL under the demo's shipped files as `{demo}/...` (the rest of the URL as it is); any other
    as it is."""
    here = DEMO.as_uri()
    return DEMO_PLACE + url[len(here):] if url.startswith(here + "/") else url


def local_url(url: str) -> str:
    """`portable_url` read back: `{demo}/...` as this installation's file:// URL."""
    return DEMO.as_uri() + url[len(DEMO_PLACE):] if url.startswith(DEMO_PLACE + "/") else url


def interpreter_name(python: str) -> str:
    """An interpreter by its command name (`python3.11`), never this machine's path of it: a target runs it
    from its PATH."""
    return PurePosixPath(python).name if python.startswith("/") else python
