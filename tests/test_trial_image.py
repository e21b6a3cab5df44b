"""doctor's trial image's only file (issue 40): a static x86_64 executable the tool writes, which waits until
it is killed, as the engine's `--entrypoint sleep` needs."""

from __future__ import annotations

import platform
import signal
import subprocess

import pytest

from toolchain.target.container.trial import sleeper_elf


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the sleeper is an x86_64 executable")
def test_the_sleeper_runs_here_and_waits_until_killed(tmp_path):
    exe = tmp_path / "sleep"
    exe.write_bytes(sleeper_elf())
    exe.chmod(0o755)
    proc = subprocess.Popen([str(exe), "infinity"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1)  # still waiting: it does not exit by itself
    finally:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM
    assert len(sleeper_elf()) == 129 and sleeper_elf()[:4] == b"\x7fELF"
