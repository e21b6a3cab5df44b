"""`python -m toolchain` and the `toolchain` script."""

from __future__ import annotations

import sys


def run() -> int:
    from toolchain.cli import main

    return main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(run())
