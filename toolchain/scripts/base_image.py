"""What an image's interpreter holds: every installed distribution (canonical name, version, and the sha256 of
its `.dist-info/RECORD`, which names every installed file with its hash) and the Python version. Prints one JSON
object {"python-version": ..., "dists": [...]}, the distributions sorted by name; the first of a name on
sys.path wins."""

from __future__ import annotations

import hashlib
import json
import sys
from importlib import metadata


def main() -> None:
    dists: dict[str, dict[str, str]] = {}
    for d in metadata.distributions():
        name = (d.metadata["Name"] or "").strip()
        if not name:
            continue
        record = d.read_text("RECORD")
        key = name.lower().replace("_", "-").replace(".", "-")
        dists.setdefault(key, {"name": key, "version": d.version,
                               "record-sha256": hashlib.sha256(record.encode()).hexdigest() if record else ""})
    print(json.dumps({"python-version": "{}.{}.{}".format(*sys.version_info[:3]),
                      "dists": sorted(dists.values(), key=lambda x: x["name"])}))


if __name__ == "__main__":
    main()
