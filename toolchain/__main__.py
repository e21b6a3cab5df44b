"""`python -m toolchain` and the `toolchain` script: a warm no-op is answered from its record (core/noop.py)
before the rest of the tool is imported."""

from __future__ import annotations

import contextlib
import sys


def run() -> int:
    from toolchain.core import noop

    argv = sys.argv[1:]
    code = noop.answer(argv)
    if code is not None:
        return code
    with noop.recording(argv) as recorder:
        from toolchain.cli import main

        code = main(argv)
    with contextlib.suppress(OSError):  # (a cache that cannot be written: the next run is a full one)
        recorder.keep(code)
    return code


if __name__ == "__main__":
    raise SystemExit(run())
