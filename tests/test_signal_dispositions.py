"""The suite's children see the stop signals at their default disposition, whatever the suite inherited
(issue 43 item 8): a suite started with SIGINT and SIGHUP ignored (`nohup … &`) still passes its signal tests."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import STOP_SIGNALS

ROOT = Path(__file__).resolve().parent.parent


def ignored_by(status: str) -> set[int]:
    """The signal numbers a /proc/PID/status text says are ignored (its SigIgn mask)."""
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    return {n for n in range(1, 65) if mask & (1 << (n - 1))}


def test_a_child_of_the_suite_sees_no_stop_signal_ignored() -> None:
    status = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True, check=True).stdout
    assert not ignored_by(status) & {int(s) for s in STOP_SIGNALS}, status


def test_a_suite_started_with_stop_signals_ignored_gives_its_children_the_defaults(tmp_path: Path) -> None:
    """A real pytest started the way `nohup` starts a job (SIGINT and SIGHUP ignored, through exec), with the
    suite's conftest (a probe file outside tests/ loads it as a plugin): the test inside finds the defaults in
    its own child. Without the conftest's reset the same probe fails (SIGINT and SIGHUP in SigIgn)."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import subprocess\n"
        "from tests.test_signal_dispositions import ignored_by\n"
        "def test_child():\n"
        "    status = subprocess.run(['cat', '/proc/self/status'], capture_output=True, text=True).stdout\n"
        "    assert not ignored_by(status) & {1, 2, 3, 15}, status\n")
    ignore_then_exec = ("import os, signal, sys\n"
                        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                        "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
                        "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n")
    r = subprocess.run([sys.executable, "-c", ignore_then_exec, "-m", "pytest", "-p", "no:cacheprovider",
                        "-p", "no:benchmark", "-p", "tests.conftest", "-q", "--rootdir", str(ROOT),
                        "-c", str(ROOT / "pyproject.toml"), str(probe)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout, r.stdout
    assert signal.getsignal(signal.SIGINT) != signal.SIG_IGN
