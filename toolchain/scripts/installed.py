"""Every distribution the interpreter has installed, in sys.path order, with the sha256 of the file it was
installed from: as pip recorded it in direct_url.json (`sha256-from` "pip"), or, for an older pip that records
none (Debian's 23.0), of the local file direct_url.json names ("file"). Prints one JSON list."""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from urllib.parse import unquote, urlparse


def origin(dist: metadata.Distribution) -> tuple[str, str]:
    """(sha256, where it came from: "pip" | "file" | "")."""
    try:
        info = json.loads(dist.read_text("direct_url.json") or "{}")
        archive = info.get("archive_info", {})
        sha = (archive.get("hashes") or {}).get("sha256", "") or archive.get("hash", "").partition("sha256=")[2]
        if sha:
            return sha, "pip"
        url = urlparse(info.get("url", ""))
        path = unquote(url.path)
        if url.scheme == "file" and os.path.isfile(path):
            with open(path, "rb") as f:
                return hashlib.sha256(f.read()).hexdigest(), "file"
    except Exception:
        pass
    return "", ""


def main() -> None:
    out = []
    for d in metadata.distributions():
        sha, source = origin(d)
        out.append({"name": d.metadata["Name"], "version": d.version, "sha256": sha, "sha256-from": source})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
