"""Helpers for the smoke tests: free ports, the fault-injecting server, locks, results of `toolchain smoke`.

(A module of its own, not conftest.py, so that `from tests.smoke.smoke_helpers import ...` is unambiguous.)
"""

from __future__ import annotations

import json
import shlex
import socket
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolchain.lock import LockedComponent

HERE = Path(__file__).resolve().parent
FAULT_SERVER = HERE / "fault_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fault_cmd(mode: str = "healthy", *extra: str, python: str = sys.executable) -> str:
    """A --serve-cmd that starts the fault server (placeholders filled by toolchain smoke)."""
    return shlex.join([python, str(FAULT_SERVER), "--port", "{port}", "--mode", mode, *extra])


@dataclass
class SmokeRun:
    code: int
    out: Path
    seconds: float
    stdout: str

    @property
    def report(self) -> dict:
        return json.loads((self.out / "report.json").read_text())

    @property
    def run(self) -> dict:
        return self.report["runs"][0]

    def case(self, name: str, run: int = 0) -> dict:
        return next(c for c in self.report["runs"][run]["cases"] if c["name"] == name)

    def verdicts(self, run: int = 0) -> dict:
        return {c["name"]: c["verdict"] for c in self.report["runs"][run]["cases"]}

    def finding_ids(self, run: int = 0) -> list:
        return [f["id"] for f in self.report["runs"][run]["findings"]]

    def junit_failure(self, case: str) -> ET.Element:
        """The <failure> element of `case` in junit.xml (there must be one)."""
        failure = ET.parse(self.out / "junit.xml").getroot().find(f".//testcase[@name='{case}']/failure")
        assert failure is not None, f"junit.xml has no failure for {case!r}"
        return failure


def write_test_lock(out_dir: Path, smoke: dict, components: Iterable[LockedComponent] = (),
                    python: str = sys.executable) -> Path:
    """A real stack.lock.toml (and pylock.toml) written by toolchain.lock.write_lock."""
    from toolchain.lock import Lock, write_lock
    from toolchain.target.facts import TargetInfo, ToolchainInfo

    lock = Lock(recipe_name="smoke-test", recipe_path="recipes/smoke-test.toml", recipe_sha256="0" * 64,
                recipe_text="", toolchain=ToolchainInfo(), target=TargetInfo(runtime="host", python=python),
                smoke=smoke, components=tuple(components))
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_lock(lock, out_dir)
