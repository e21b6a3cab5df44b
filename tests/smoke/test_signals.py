"""SIGINT, SIGTERM and SIGHUP to `toolchain smoke` mid-run (a Ctrl-C, a CI cancel or `timeout`, a closed
terminal): the server's whole process group goes, a partial report says what ran, the port is free again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.smoke.smoke_helpers import fault_cmd, free_port
from tests.spine_helpers import live_in_group, wait_for_text
from toolchain.core.proc import background, signals

DEADLINE = 60.0


def wait_for(path: Path, text: str, count: int = 1) -> None:
    wait_for_text(path, text, count, timeout=DEADLINE)


def smoke_argv(mode: str, port: int, out: Path, cases: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "toolchain", "smoke", "--json", "--serve-cmd", fault_cmd(mode, *extra),
            "--cases", cases, "--port", str(port), "--out", str(out), "--ready-timeout", "120",
            "--request-timeout", "300"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_stops_the_server_group_and_writes_a_partial_report(tmp_path, sig):
    port, out, pids = free_port(), tmp_path / "out", tmp_path / "server.json"
    # math hangs (the first chat sleeps); the server has two engine-like children that ignore SIGINT/SIGTERM
    tool = subprocess.Popen(smoke_argv("slow-first", port, out, "models,math,qa", "--slow-seconds", "300",
                                       "--children", "2", "--stubborn-children", "--pid-file", str(pids)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(out / "smoke" / "server.log", "engine worker ready", 2)  # they ignore SIGINT/SIGTERM now
        wait_for(out / "smoke" / "server.log", "request 1 received: POST /v1/chat/completions")
        server = json.loads(pids.read_text())
        assert len(live_in_group(server["pgid"])) == 3  # the server and its two children, running
        os.kill(tool.pid, sig)
        stdout, stderr = tool.communicate(timeout=DEADLINE)
    finally:  # whatever the outcome, leave nothing running
        if tool.poll() is None:
            os.killpg(tool.pid, signal.SIGKILL)
            tool.wait()
        if pids.is_file() and live_in_group(json.loads(pids.read_text())["pgid"]):
            os.killpg(json.loads(pids.read_text())["pgid"], signal.SIGKILL)
    assert tool.returncode == 128 + sig, stderr
    # nothing of the server's process group, nor of the tool's, is left
    assert live_in_group(server["pgid"]) == []
    assert live_in_group(tool.pid) == []
    # the partial report says what ran and what was running
    data = json.loads(stdout)
    assert data["verdict"] == "interrupted"
    assert data["interrupted"] == sig.name
    assert data["exit_code"] == 128 + sig
    rep = json.loads((out / "report.json").read_text())
    assert rep["verdict"] == "interrupted"
    assert rep["exit_code"] == 128 + sig
    assert rep["interrupted"] == {"signal": sig.name, "stage": "serve", "running": "smoke/math", "cases_run": 1}
    cases = {c["name"]: c for c in rep["runs"][0]["cases"]}
    assert cases["models"]["verdict"] == "pass"
    assert cases["math"]["category"] == "interrupted"
    assert sig.name in cases["math"]["message"]
    assert cases["qa"]["category"] == "not-run"
    assert rep["runs"][0]["interrupted"] == sig.name
    summary = (out / "summary.md").read_text()
    assert f"**Interrupted by {sig.name}** while case `smoke/math` was running" in summary
    assert ET.parse(out / "junit.xml").getroot().find(".//testcase[@name='models']") is not None
    log = (out / "smoke" / "server.log").read_text()
    assert "INFO: Shutting down" in log  # the server got its SIGINT first
    assert log.rstrip().endswith("### toolchain smoke: server exit code 0")
    # the next run on the same port succeeds
    again = subprocess.run(smoke_argv("healthy", port, tmp_path / "again", "models,math"), capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr


def test_background_stop_escalates_to_the_whole_group(tmp_path):
    """core.proc.start: a group whose children ignore SIGINT and SIGTERM still goes, with the leader's real
    status; the log has the output."""
    pids = tmp_path / "pids.json"
    log = tmp_path / "server.log"
    port = free_port()
    server = background.start([sys.executable, str(Path(__file__).parent / "fault_server.py"), "--port", str(port),
                         "--children", "2", "--stubborn-children", "--pid-file", str(pids)], log=log)
    with server:
        wait_for(log, "engine worker ready", 2)
        wait_for(log, "INFO: Uvicorn running")  # the leader serves (its Ctrl-C handling is in place)
        members = json.loads(pids.read_text())
        assert members["pgid"] == server.pid
        assert server.alive()
        assert server.group_alive()
        code = server.stop(grace=1.0)
    assert code == 0  # the leader handles SIGINT (KeyboardInterrupt) and exits 0; its children needed SIGKILL
    assert not server.group_alive()
    assert live_in_group(server.pid) == []
    assert "INFO: Shutting down" in log.read_text()
    assert log.read_text().endswith("# exit code 0\n")
    assert background.exit_status(-11) == "signal SIGSEGV (11)"
    assert background.exit_status(3) == "exit code 3"


def test_interruptible_leaves_ignored_signals_alone():
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals.interruptible():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN       # nohup stays nohup
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)
            with pytest.raises(signals.Interrupted) as stopped:  # noqa: PT012 (the signal arrives during the sleep)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
        assert stopped.value.signum == signal.SIGTERM
        assert stopped.value.exit_code == 143
        # the stop is over: a later command of this process is not taken for one the signal reached (bisect's
        # tester read a test killed by its own timeout as the stop, and raised KeyboardInterrupt in pytest)
        assert not signals.STOPPING.is_set()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, old)
