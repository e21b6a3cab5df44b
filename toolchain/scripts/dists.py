"""The installed version of each distribution named, with its local build label (`2.14.0+xpu`), read from the
installed metadata without importing anything. With `--abi`, also torch's C++11 ABI flag of each: "1" or "0"
from the `std::__cxx11` symbols of its libc10 ("" where it has none). Prints one JSON object
{name: null | {"version": ..., "cxx11-abi": ...}}.

    python dists.py [--abi] NAME...
"""

from __future__ import annotations

import json
import sys
from importlib import metadata


def cxx11_abi(dist: metadata.Distribution) -> str:
    for f in dist.files or ():
        if f.name.startswith("libc10.so"):
            try:
                with open(str(f.locate()), "rb") as fh:
                    data = fh.read()
            except OSError:
                return ""
            return "1" if b"__cxx11" in data else "0"
    return ""


def main(args: list[str]) -> None:
    abi = args[:1] == ["--abi"]
    out: dict[str, dict[str, str] | None] = {}
    for name in args[1:] if abi else args:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            out[name] = None
            continue
        out[name] = {"version": dist.version, "cxx11-abi": cxx11_abi(dist) if abi else ""}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
