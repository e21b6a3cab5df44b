"""Stop signals reach every child the tool started (issue 22): SIGTERM, SIGINT or SIGHUP sent to the tool's PID
alone, by a parent shell script that leads the process group (the tool is NOT its group's leader, as under CI
or `nohup ... &`), stops the build's step, a child the step started, a grandchild that left the group with
setsid (caught by the child's cgroup, where one can be made) and a step that ignores SIGTERM (SIGKILL after
the grace period), all within 5 s; and a request to a registry that does not answer is dropped at once.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from spine_helpers import component, live_in_group, recipe_data

from toolchain.core import proc

STEP = """\
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a step that ignores SIGTERM: only SIGKILL ends it
sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
child = subprocess.Popen(sleeper)
escaped = subprocess.Popen(sleeper, start_new_session=True)  # left the tool's child's process group
with open(os.environ["STEP_PIDS"], "w") as f:
    f.write(f"{os.getpid()} {child.pid} {escaped.pid}\\n")
time.sleep(300)
"""

# The parent: the process group's leader (started in a session of its own); the tool is its background job.
PARENT = """\
set -u
{launch} > "$OUT/stdout" 2> "$OUT/stderr" &
tool=$!
while [ ! -s "$OUT/pids" ]; do sleep 0.05; kill -0 $tool 2>/dev/null || break; done
sent=$(date +%s.%N)
kill -{sig} $tool
wait $tool
echo "$? $sent $(date +%s.%N)" > "$OUT/result"
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_to_the_tool_alone_stops_every_child_within_5s(ws, make_repo, sig):
    repo = make_repo("stepper", "tiny")
    repo.commit("the step", {"step.py": STEP})
    ws.recipe("r", recipe_data({"stepper": component(repo, command=["{python}", "{src}/step.py"],
                                                     env={"STEP_PIDS": str(ws.root / "pids")})}))
    tool = " ".join(f"'{a}'" for a in ws.cli.argv(["build", "--recipe", "r", "--out", ws.root / "out",
                                                   "--cache-dir", ws.cache, "--json"]))
    # a background job of a script ignores SIGINT; as a Ctrl-C to a script would, `trap - INT` restores it
    launch = f"(trap - INT; exec {tool})" if sig == signal.SIGINT else tool
    script = ws.root / "parent.sh"
    script.write_text(PARENT.format(launch=launch, sig=signal.Signals(sig).name[3:]))
    parent = subprocess.Popen(["bash", str(script)], cwd=ws.root, env={**ws.env, "OUT": str(ws.root)},
                              start_new_session=True, stdin=subprocess.DEVNULL)
    pids: list[int] = []
    try:
        assert parent.wait(timeout=120) == 0
        pids = [int(p) for p in (ws.root / "pids").read_text().split()]
        code, sent, ended = (ws.root / "result").read_text().split()
        stderr = (ws.root / "stderr").read_text()
        assert int(code) == 128 + sig, stderr
        assert float(ended) - float(sent) < 5.0, stderr
        assert "Traceback" not in stderr
        step, child, escaped = pids
        assert not _alive(step) and not _alive(child), stderr  # the step ignored SIGTERM: SIGKILL came
        assert live_in_group(parent.pid) == []
        assert live_in_group(step) == []
        if proc._find_cgroup_root() is not None:
            assert not _alive(escaped), "a grandchild that left the process group outlived the tool"
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)


def test_a_pending_registry_request_is_dropped_at_once(ws, make_repo):
    """SIGINT while the remote cache does not answer: exit 130 at once, not after the request's timeout."""
    repo = make_repo("quiet", "tiny")
    ws.recipe("r", recipe_data({"quiet": component(repo)}))
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted = threading.Event()
    held: list[socket.socket] = []

    def hold() -> None:  # accept, read, never answer
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            accepted.set()

    threading.Thread(target=hold, daemon=True).start()
    url = f"oci://127.0.0.1:{server.getsockname()[1]}/team"
    tool = subprocess.Popen(ws.cli.argv(["build", "--recipe", "r", "--out", ws.root / "out", "--cache-dir",
                                         ws.cache, "--remote-cache", url, "--remote-insecure", "--json"]),
                            cwd=ws.root, env={**ws.env, "TOOLCHAIN_REMOTE_TIMEOUT": "60"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert accepted.wait(60), "the build never asked the registry"
        time.sleep(0.3)  # the request is sent and waits for its answer
        sent = time.monotonic()
        tool.send_signal(signal.SIGINT)
        _out, err = tool.communicate(timeout=60)
        took = time.monotonic() - sent
        assert tool.returncode == 130, err
        assert took < 3.0, f"exit after {took:.1f}s: the request was waited out\n{err}"
    finally:
        if tool.poll() is None:
            tool.kill()
        server.close()
        for conn in held:
            conn.close()


def test_every_child_runs_in_a_process_group_and_a_cgroup_of_its_own(tmp_path):
    show = [sys.executable, "-c", "import os; print(os.getsid(0), os.getpgid(0), os.getpid()); "
                                  "print(open('/proc/self/cgroup').read())"]
    out = proc.run(show, capture=True).stdout.splitlines()
    sid, pgid, pid = map(int, out[0].split())
    assert sid == pgid == pid
    assert pgid != os.getpgid(0)
    root = proc._find_cgroup_root()
    if root is not None:
        assert f"/toolchain-{os.getpid()}-{pid}" in "\n".join(out[1:])
        assert not list(root.glob(f"toolchain-{os.getpid()}-*")), "a cgroup was left behind"
    assert proc.CHILDREN.live() == []


def test_cgroups_left_by_a_killed_tool_are_removed_nested_ones_too():
    root = proc._find_cgroup_root()
    if root is None:
        pytest.skip("no cgroup v2 can be made here")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a pid no process has now
    stale = root / f"toolchain-{gone}-1"
    (stale / "toolchain-1-2").mkdir(parents=True)  # what a tool run by the killed tool made under it
    proc._find_cgroup_root()
    assert not stale.exists()
