"""`toolchain ARGS` run through a wrapper around its entry point (`toolchain.__main__:run`, what the script and
`python -m toolchain` call) that says how each run was answered: "record" (core/noop.py answered it before
the rest of the tool was imported) or "full" (`toolchain.cli` was imported)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.spine_helpers import Result

WRAPPER = """\
import os
import sys
from toolchain.__main__ import run
code = run()
with open(os.environ["NOOP_TEST_WHICH"], "w") as f:
    f.write("full" if "toolchain.cli" in sys.modules else "record")
raise SystemExit(code)
"""
DEBUG_LINES = ("toolchain: this run was not recorded:", "toolchain: a full run:")


class Runs:
    """Runs with `python` in `cwd` under `env` (TOOLCHAIN_NOOP_DEBUG on: stderr says why a run was not
    recorded or not answered); the wrapper and its answer file live in `home`."""

    def __init__(self, python: Path | str, cwd: Path, env: dict[str, str], home: Path) -> None:
        self.python, self.cwd = str(python), cwd
        self.script = home / "noop-wrapper.py"
        self.script.write_text(WRAPPER)
        self.which_file = home / "noop-which.txt"
        self.env = {**env, "NOOP_TEST_WHICH": str(self.which_file), "TOOLCHAIN_NOOP_DEBUG": "1"}

    def __call__(self, *args: object, env: dict[str, str] | None = None) -> tuple[Result, str]:
        self.which_file.unlink(missing_ok=True)
        argv = [self.python, str(self.script), *map(str, args)]
        r = subprocess.run(argv, cwd=self.cwd, env={**self.env, **(env or {})}, capture_output=True, text=True,
                           timeout=300, stdin=subprocess.DEVNULL)
        return Result(argv, r.returncode, r.stdout, r.stderr), self.which_file.read_text()

    def truth(self, *args: object, env: dict[str, str] | None = None) -> Result:
        """The same command run in full (never answered from, nor kept as, a record)."""
        r, which = self(*args, env={**(env or {}), "TOOLCHAIN_FULL_RUN": "1"})
        assert which == "full"
        return r

    def until_recorded(self, *args: object, env: dict[str, str] | None = None, tries: int = 4) -> Result:
        """Runs until one is answered from its record (a run that wrote, restoring, rebuilding or rewriting a
        log as a cache hit, is followed by one that records); that answer, checked against a full run's."""
        for _ in range(tries):
            r, which = self(*args, env=env)
            if which == "record":
                break
        assert which == "record", r
        same(r, self.truth(*args, env=env))
        return r


def said(r: Result) -> tuple[int, str, str]:
    """What a run said, without the lines TOOLCHAIN_NOOP_DEBUG adds."""
    return r.returncode, r.stdout, "".join(x for x in r.stderr.splitlines(True) if not x.startswith(DEBUG_LINES))


def same(a: Result, b: Result) -> None:
    assert said(a) == said(b)
