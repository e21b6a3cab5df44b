"""Helpers of the CI prebuild job (ci/workflows/stack.yml), reading `toolchain ... --json` documents.

    python3 ci/prebuild.py component PLAN.json COMPONENT       -> "URL REF COMMIT" of the component
    python3 ci/prebuild.py known PLAN.json KNOWN.json COMPONENT -> exit 0 if the registry (`toolchain cache ls
                                                                   --remote --json`) holds its cache key
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def component(plan: dict, name: str) -> dict:
    for comp in plan["components"]:
        if comp["name"] == name:
            return comp
    raise SystemExit(f"no component {name!r} in the plan (components: {', '.join(c['name'] for c in plan['components'])})")


def read(path: str) -> dict:
    """A JSON document the toolchain wrote (its file closed once read)."""
    return json.loads(Path(path).read_text())


def main(argv: list[str]) -> int:
    if argv[:1] == ["component"] and len(argv) == 3:
        comp = component(read(argv[1]), argv[2])
        print(comp["url"], comp["ref"] or "main", comp["commit"])
        return 0
    if argv[:1] == ["known"] and len(argv) == 4:
        key = component(read(argv[1]), argv[3])["cache-key"]
        return 0 if key in {e["key"] for e in read(argv[2])["entries"]} else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
