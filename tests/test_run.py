"""toolchain/run.py, the one way to run a command: argv lists, a full env mapping, a log, errors with the tail."""

from __future__ import annotations

import os
import sys

import pytest

from toolchain.core.proc.runner import CommandFailed, CommandTimeout, merge_env, run
from toolchain.core.redact import MASK
from toolchain.errors import BuildError

PY = sys.executable


def test_capture_returns_stdout_and_stderr_separately(tmp_path):
    r = run([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr)"], capture=True)
    assert (r.returncode, r.stdout, r.stderr) == (0, "out\n", "err\n")
    assert r.argv == (PY, "-c", "import sys; print('out'); print('err', file=sys.stderr)")
    assert r.seconds >= 0


def test_output_goes_to_the_log_with_the_command_cwd_and_exit(tmp_path):
    log = tmp_path / "logs" / "step.log"
    r = run([PY, "-c", "import sys; print('to stdout'); print('to stderr', file=sys.stderr)"], cwd=tmp_path,
            log=log)
    assert r.returncode == 0
    assert r.stdout == ""
    assert r.log == log
    text = log.read_text()
    lines = text.splitlines()
    assert lines[0].startswith(f"$ {PY} -c ")
    assert lines[1] == f"  (in {tmp_path})"
    assert "to stdout\n" in text
    assert "to stderr\n" in text
    assert lines[-1].startswith("# exit 0 after ")
    run([PY, "-c", "print('second')"], log=log)
    assert log.read_text().startswith(text)
    assert "second" in log.read_text()


def test_a_failure_raises_with_the_command_log_and_tail(tmp_path):
    log = tmp_path / "fail.log"
    script = "import sys\nfor i in range(100): print('line', i)\nsys.exit(3)"
    with pytest.raises(CommandFailed) as info:
        run([PY, "-c", script], log=log, hint="try again")
    err = info.value
    assert err.returncode == 3
    assert err.log == log
    assert err.return_code == 1
    assert err.hint == "try again"
    tail = err.tail.splitlines()
    assert tail[-1] == "line 99"
    assert len(tail) == 40
    assert tail[0] == "line 60"
    assert "command failed with exit code 3" in str(err)
    assert f"log: {log}" in str(err)
    assert "line 99" in str(err)
    assert "line 0\n" in log.read_text()  # the log keeps everything


def test_check_false_returns_the_exit_code_and_success_codes_widen_success():
    assert run([PY, "-c", "raise SystemExit(5)"], check=False, capture=True).returncode == 5
    assert run([PY, "-c", "raise SystemExit(1)"], success_codes=(0, 1), capture=True).returncode == 1
    with pytest.raises(CommandFailed):
        run([PY, "-c", "raise SystemExit(2)"], success_codes=(0, 1), capture=True)


def test_env_is_the_complete_environment_and_none_removes(monkeypatch):
    monkeypatch.setenv("RUN_TEST_INHERITED", "yes")
    show = [PY, "-c", "import os; print(os.environ.get('RUN_TEST_INHERITED'), os.environ.get('ONLY_HERE'))"]
    assert run(show, capture=True).stdout == "yes None\n"  # env=None: inherit
    assert run(show, env={"ONLY_HERE": "1"}, capture=True).stdout == "None 1\n"  # a full mapping, not a layer
    assert merge_env({"A": "1", "B": "2"}, {"B": None, "C": 3}, {"A": "x"})  # type: ignore[dict-item]  # an int on purpose: merge_env writes str() of it == {"A": "x", "C": "3"}


def test_argv_must_be_a_list_of_strings():
    with pytest.raises(TypeError, match=r"did you mean \['echo', 'a b'\]"):
        run("echo 'a b'")
    with pytest.raises(TypeError):
        run(["echo", 3])  # type: ignore[list-item]  # a wrong type on purpose: the run-time check is under test
    with pytest.raises(TypeError):
        run([])


def test_a_missing_program_is_a_clear_error():
    with pytest.raises(CommandFailed) as info:
        run(["no-such-program-for-toolchain-tests", "--version"], capture=True)
    assert info.value.returncode == 127
    assert "program not found" in str(info.value)
    assert "install 'no-such-program-for-toolchain-tests'" in (info.value.hint or "")
    assert not isinstance(info.value, CommandTimeout)


@pytest.mark.parametrize("capture", [True, False])
def test_check_false_returns_a_missing_program_as_exit_127(tmp_path, capture):
    log = tmp_path / "missing.log"
    r = run(["no-such-program-for-toolchain-tests", "--version"], check=False, capture=capture, log=log)
    assert (r.returncode, r.started, r.stdout) == (127, False, "")
    assert "no-such-program-for-toolchain-tests: program not found" in r.stderr
    assert "program not found" in log.read_text()
    not_executable = tmp_path / "script"
    not_executable.write_text("#!/bin/sh\necho hi\n")
    r = run([str(not_executable)], check=False, capture=capture)
    assert (r.returncode, r.started) == (126, False)
    assert "Permission denied" in r.stderr
    assert run([PY, "-c", "raise SystemExit(127)"], check=False, capture=capture).started  # ran, exited 127


@pytest.mark.parametrize("capture", [True, False])
def test_a_timeout_is_its_own_error_with_the_output_so_far(tmp_path, capture):
    log = tmp_path / "slow.log"
    script = "import sys, time; print('before the wait', flush=True); time.sleep(60)"
    with pytest.raises(CommandTimeout) as info:
        run([PY, "-c", script], timeout=0.5, capture=capture, log=log, check=False)  # whatever check says
    err = info.value
    assert isinstance(err, CommandFailed)
    assert isinstance(err, BuildError)
    assert err.return_code == 1
    assert err.timeout == 0.5
    assert err.returncode < 0
    assert "command timed out after 0.5s" in str(err)
    assert "before the wait" in err.tail
    assert "before the wait" in log.read_text()
    assert "# timed out after 0.5s" in log.read_text()


def test_every_command_runs_in_a_session_of_its_own():
    show = [PY, "-c", "import os; print(os.getsid(0), os.getpgid(0))"]
    sid, pgid = map(int, run(show, capture=True).stdout.split())
    assert sid != os.getsid(0)
    assert pgid != os.getpgid(0)


def test_stdin_is_passed():
    r = run([PY, "-c", "import sys; print(sys.stdin.read().upper())"], stdin=b"hello", capture=True)
    assert r.stdout == "HELLO\n"
    r = run([PY, "-c", "import sys; print(len(sys.stdin.read()))"], capture=True)
    assert r.stdout == "0\n"  # no stdin: not the terminal, an empty one


def test_secrets_are_masked_in_the_log_the_command_line_and_the_tail(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "MY_API_TOKEN": "tok-12345678", "HOME": str(tmp_path)}
    log = tmp_path / "secret.log"
    script = "import os, sys; print('value', os.environ['MY_API_TOKEN']); sys.exit(1)"
    with pytest.raises(CommandFailed) as info:
        run([PY, "-c", script, "tok-12345678"], env=env, log=log)
    text = log.read_text()
    assert "tok-12345678" not in text
    assert f"value {MASK}" in text
    assert "tok-12345678" not in str(info.value)
    assert f"value {MASK}" in info.value.tail
    r = run([PY, "-c", "import os; print(os.environ['MY_API_TOKEN'])"], env=env, capture=True, log=log)
    assert r.stdout == "tok-12345678\n"  # the caller gets the real output; only logs are masked
    assert "tok-12345678" not in log.read_text()


def test_verbose_streams_the_output_to_stderr(capfd, tmp_path):
    run([PY, "-c", "print('streamed line')"], log=tmp_path / "v.log", verbose=True)
    assert "streamed line" in capfd.readouterr().err


def test_exited_within_is_told_by_the_kernel_reaps_and_keeps_the_deadline():
    """A command's end is seen as it happens (a pidfd, not CPython's sleeping wait loop), the process is reaped
    with its status, and a deadline still stops the wait."""
    import subprocess

    from toolchain.core.proc.runner import exited_within

    done = subprocess.Popen([PY, "-c", "raise SystemExit(3)"])
    assert exited_within(done, 30) is True and done.returncode == 3
    slow = subprocess.Popen([PY, "-c", "import time; time.sleep(30)"])
    try:
        assert exited_within(slow, 0.2) is False and slow.returncode is None
    finally:
        slow.kill()
    assert exited_within(slow, None) is True and slow.returncode == -9
