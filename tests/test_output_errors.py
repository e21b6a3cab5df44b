"""Output errors are output errors (issue 39): stdout or stderr on /dev/full, a pipe whose reader has gone,
closed: no traceback, no claim about the disk the tool writes, and the exit code documented in `--help`
(0: nothing was lost; 1: the output could not be written, said on stderr; 141: the reader left, silent as
`yes | head`; a failing command keeps its own code). A quick command here; the build's are in
tests/journeys/test_cache_trust.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.spine_helpers import isolated_env


def run(tmp_path, args, *, stdout=None, stderr=subprocess.PIPE):
    return subprocess.run([sys.executable, "-m", "toolchain", *args], cwd=tmp_path, env=isolated_env(tmp_path),
                          stdout=stdout, stderr=stderr, text=True, timeout=120, stdin=subprocess.DEVNULL)


def gone_reader() -> int:
    """The write end of a real pipe whose reader has closed it (a write: EPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    return write_end


@pytest.mark.parametrize("extra", [(), ("--json",)])
def test_stdout_full_or_without_a_reader(tmp_path, extra):
    with open("/dev/full", "w") as full:
        r = run(tmp_path, ["recipes", *extra], stdout=full)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip() == ("ERROR: the command finished, but its output could not be written to stdout: "
                                "No space left on device")
    write_end = gone_reader()
    try:
        r = run(tmp_path, ["recipes", *extra], stdout=write_end)
    finally:
        os.close(write_end)
    assert r.returncode == 141 and r.stderr == "", r.stderr


def test_a_failing_command_keeps_its_code_whatever_its_output_does(tmp_path):
    write_end = gone_reader()
    try:
        r = run(tmp_path, ["build", "--recipe", "no-such-recipe", "--json"], stdout=write_end)
        both = run(tmp_path, ["build", "--recipe", "no-such-recipe"], stdout=write_end, stderr=write_end)
    finally:
        os.close(write_end)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "ERROR:" in r.stderr, r.stderr
    assert both.returncode == 2


def test_the_exit_codes_are_documented(tmp_path):
    r = run(tmp_path, ["--help"], stdout=subprocess.PIPE)
    assert "141  the reader of the output left" in r.stdout and "stdout or stderr closed or full" in r.stdout
