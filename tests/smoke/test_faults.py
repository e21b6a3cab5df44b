"""`toolchain smoke` against a fault-injecting server on 127.0.0.1: each fault gives the right verdict,
triage entry and exit code, and nothing hangs."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

from tests.smoke.smoke_helpers import fault_cmd, free_port, write_test_lock

ALL = "models,first,math,qa,json,image,image-json,repeat"
FAST = ["--ready-timeout", "20", "--request-timeout", "10"]


def test_healthy_server_passes_every_case_and_writes_reports(smoke):
    r = smoke("--serve-cmd", fault_cmd("healthy"), "--cases", ALL + ",long-context,restart", *FAST)
    assert r.code == 0, r.stdout
    assert set(r.verdicts().values()) == {"pass"}
    rep = r.report
    assert rep["verdict"] == "pass"
    assert rep["exit_code"] == 0
    assert r.run["ready"]["ok"]
    assert not r.run["findings"]
    assert not r.run["crashed"]
    # raw requests are kept: the image goes as a data URL part, image-json asks for a json_schema
    image_req = r.case("image-json")["exchanges"][0]["request"]
    parts = image_req["messages"][0]["content"]
    assert parts[1]["type"] == "image_url"
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert image_req["response_format"]["type"] == "json_schema"
    assert json.loads(json.loads(r.case("image-json")["exchanges"][0]["response"])["choices"][0]["message"]["content"])
    assert len(r.case("repeat")["exchanges"]) == 3
    assert r.case("first")["metrics"]["latency_seconds"] > 0
    # restart: the log shows two starts
    assert (r.out / "smoke" / "server.log").read_text().count("### toolchain smoke: start #") == 2
    summary = (r.out / "summary.md").read_text()
    assert "# toolchain smoke: PASS" in summary
    assert "| image-json | PASS | yes |" in summary
    suites = ET.parse(r.out / "junit.xml").getroot()
    assert suites.get("failures") == "0"
    assert suites.get("errors") == "0"
    assert suites.get("tests") == "11"  # ready + 10 cases
    assert json.loads(r.stdout)["ok"] is True


def test_crash_on_first_request(smoke):
    r = smoke("--serve-cmd", fault_cmd("crash-first"), "--cases", ALL, *FAST)
    assert r.code == 1
    v = r.verdicts()
    assert v["models"] == "pass"
    assert v["first"] == "error"
    assert all(v[c] == "error" for c in ("math", "qa", "json", "repeat"))
    assert "server exited with exit code 139 during case first" in r.case("math")["message"]
    assert r.run["crashed"]
    assert r.run["server_exit_code"] == 139
    assert r.finding_ids() == ["server-crash"]
    assert "Segmentation fault" in (r.out / "smoke" / "server.log").read_text()
    assert r.seconds < 60  # the cases after the crash did not each wait out the 10 s request timeout
    junit = ET.parse(r.out / "junit.xml").getroot()
    assert junit.get("errors") == "7"


def test_out_of_memory_is_marked_and_triaged(smoke):
    r = smoke("--serve-cmd", fault_cmd("oom"), "--cases", "models,math,qa", *FAST)
    assert r.code == 1
    assert r.verdicts() == {"models": "pass", "math": "fail", "qa": "fail"}
    assert r.case("math")["category"] == "http"
    assert "HTTP 500" in r.case("math")["message"]
    assert r.run["oom"] is True
    assert r.run["crashed"] is False
    oom = r.run["findings"][0]
    assert oom["id"] == "oom"
    assert oom["source"] == "log"
    assert "UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY" in oom["evidence"]
    assert any(fix.get("args") == ["--kv-cache-dtype", "fp8"] for fix in oom["fixes"])
    assert "OOM" in (r.out / "summary.md").read_text()


def test_invalid_json_fails_the_schema_cases_only(smoke):
    r = smoke("--serve-cmd", fault_cmd("invalid-json"), "--cases", ALL, *FAST)
    assert r.code == 1
    v = r.verdicts()
    assert v["json"] == "fail"
    assert v["image-json"] == "fail"
    assert {v[c] for c in ("models", "first", "math", "qa", "image", "repeat")} == {"pass"}
    assert "content is not valid JSON" in r.case("image-json")["message"]
    assert r.finding_ids() == ["wrong-output"]


def test_degenerate_repetition_is_caught_even_when_consistent(smoke):
    r = smoke("--serve-cmd", fault_cmd("degenerate"), "--cases", "math,repeat", *FAST)
    assert r.code == 1
    assert r.verdicts() == {"math": "pass", "repeat": "fail"}
    assert "degenerate output: a run of blank lines" in r.case("repeat")["message"]
    assert r.finding_ids() == ["wrong-output"]


def test_never_ready_stops_at_the_deadline(smoke):
    r = smoke("--serve-cmd", fault_cmd("never-ready"), "--cases", "models,math", "--ready-timeout", "2")
    assert r.code == 1
    assert r.run["ready"]["ok"] is False
    assert "not ready after 2s" in r.run["ready"]["reason"]
    assert r.verdicts() == {"models": "skip", "math": "skip"}
    assert r.finding_ids() == ["never-ready"]
    assert r.seconds < 60  # stopped at the 2 s deadline, not later (the bound leaves room for a busy machine)
    junit = ET.parse(r.out / "junit.xml").getroot()
    assert junit.find(".//testcase[@name='ready']/failure") is not None


def test_exit_during_startup_fails_at_once(smoke):
    r = smoke("--serve-cmd", fault_cmd("exit-early"), "--cases", "models", "--ready-timeout", "600")
    assert r.code == 1
    assert r.run["ready"]["exit_code"] == 1
    assert "exited with exit code 1 before it was ready" in r.run["ready"]["reason"]
    assert r.finding_ids() == ["exited-before-ready"]
    assert r.seconds < 120  # did not wait for the 600 s deadline
    assert "libsycl.so.8" in (r.out / "smoke" / "server.log").read_text()


def test_slow_first_request_times_out_and_later_requests_pass(smoke):
    r = smoke("--serve-cmd", fault_cmd("slow-first", "--slow-seconds", "60"), "--cases", "first,math,qa",
              "--request-timeout", "5", "--ready-timeout", "120")
    assert r.code == 1
    first = r.case("first")
    assert first["verdict"] == "fail"
    assert first["category"] == "timeout"
    assert 4.5 < first["seconds"] < 55  # the 5 s timeout, not the 60 s the server takes
    assert r.verdicts()["math"] == "pass"
    assert r.verdicts()["qa"] == "pass"
    assert r.finding_ids() == ["request-timeout"]
    assert r.seconds < 120


def test_slow_first_request_within_budget_passes_with_its_latency(smoke):
    r = smoke("--serve-cmd", fault_cmd("slow-first", "--slow-seconds", "1.5"), "--cases", "first,math", *FAST)
    assert r.code == 0
    assert r.case("first")["metrics"]["latency_seconds"] >= 1.5
    assert r.case("math")["metrics"]["latency_seconds"] < r.case("first")["metrics"]["latency_seconds"]


def test_ladder_finds_the_gdn_step(smoke):
    r = smoke("--serve-cmd", fault_cmd("gdn-unless-disabled"), "--ladder", "--cases", "math,qa", *FAST)
    assert r.code == 1
    ladder = r.report["ladder"]
    assert ladder["first_broken"] == "gdn"
    assert [s["verdict"] for s in ladder["steps"]] == ["pass", "pass", "pass", "fail"]
    runs = {run["name"]: run for run in r.report["runs"]}
    assert "--enforce-eager" in runs["eager"]["argv"]
    assert runs["eager"]["env"]["DISABLE_ESIMD_GDN_OUTPROJ"] == "1"
    assert runs["fp8-kv"]["argv"][-2:] == ["--kv-cache-dtype", "fp8"]
    assert "--enforce-eager" not in runs["xpu-graph"]["argv"]
    assert "DISABLE_ESIMD_GDN_OUTPROJ" not in runs["gdn"]["env"]
    gdn = runs["gdn"]["findings"][0]
    assert gdn["id"] == "esimd-gdn-outproj"
    assert {"DISABLE_ESIMD_GDN_OUTPROJ": "1"} in [f.get("env") for f in gdn["fixes"]]
    assert "esimd-gdn-outproj" in ladder["how"]
    assert "First step that breaks: **gdn**" in (r.out / "summary.md").read_text()


def test_ladder_stops_at_fp8_kv(smoke):
    r = smoke("--serve-cmd", fault_cmd("break-on-fp8"), "--ladder", "--cases", "math", *FAST)
    assert r.code == 1
    ladder = r.report["ladder"]
    assert ladder["first_broken"] == "fp8-kv"
    assert [s["verdict"] for s in ladder["steps"]] == ["pass", "fail", "not run", "not run"]
    assert [run["name"] for run in r.report["runs"]] == ["eager", "fp8-kv"]
    assert "degenerate output" in ladder["how"]


def test_ladder_passes_when_every_step_passes(smoke):
    r = smoke("--serve-cmd", fault_cmd("healthy"), "--ladder", "--cases", "math", *FAST)
    assert r.code == 0
    assert r.report["ladder"]["first_broken"] is None
    assert len(r.report["runs"]) == 4


def test_cli_subprocess_json_and_exit_code(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "toolchain", "smoke", "--json", "--serve-cmd", fault_cmd("oom"), "--cases", "math",
         "--port", str(free_port()), "--out", str(out), *FAST],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is False
    assert data["runs"][0]["oom"] is True
    assert data["runs"][0]["findings"] == ["oom"]
    assert (out / "junit.xml").is_file()


def test_unknown_case_is_a_usage_error(smoke):
    r = smoke("--serve-cmd", fault_cmd("healthy"), "--cases", "math,jsn")
    assert r.code == 2
    assert json.loads(r.stdout)["error"].count("did you mean 'json'?") == 1


def test_a_busy_port_is_refused_before_starting(smoke):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = smoke("--serve-cmd", fault_cmd("healthy"), "--cases", "math", "--port", str(port))
    assert r.code == 2
    assert f"port {port} on 127.0.0.1 is already in use" in json.loads(r.stdout)["error"]


# ---- issue 9: what a failure tells the engineer (root cause, blame, signatures, bodies, degenerate output)

UNKNOWN = "RuntimeError: fused_moe kernel failed: invalid argument (0xdead)"  # matches no signature


def test_an_unknown_engine_error_reaches_every_report(smoke):
    """No signature matches; the EngineCore's own exception (not only "See stack trace (above)") is in
    report.json, summary.md and the JUnit <failure> message."""
    r = smoke("--serve-cmd", fault_cmd("engine-error"), "--cases", "models,math,qa", *FAST)
    assert r.code == 1
    math = r.case("math")
    assert math["category"] == "http"
    assert "See stack trace (above)" in math["message"]
    cause = math["root_cause"]
    assert UNKNOWN in cause["headline"]
    assert UNKNOWN in cause["text"]
    assert [e["process"] for e in cause["excerpts"]] == ["EngineCore_DP0 pid=4242", f"APIServer pid={_pid(r)}"]
    assert cause["excerpts"][0]["kind"] == "traceback"
    assert cause["excerpts"][0]["causes"] == [UNKNOWN]
    assert "gguf.py" in cause["text"]  # the last frame, where it was raised
    assert r.run["root_cause"]["headline"].startswith(UNKNOWN)
    assert r.finding_ids() == ["engine-dead"]  # the generic engine signature, not a made-up specific one
    summary = (r.out / "summary.md").read_text()
    assert "Root cause (from the log):" in summary
    assert UNKNOWN in summary
    failure = r.junit_failure("math")
    assert UNKNOWN in failure.attrib["message"]
    assert UNKNOWN in (failure.text or "")
    assert UNKNOWN in json.loads(r.stdout)["root_cause"]


def _pid(r) -> int:
    log = (r.out / "smoke" / "server.log").read_text()
    return int(log.split("(APIServer pid=", 1)[1].split(")", 1)[0])


def test_triton_needs_cuda_is_recognised_and_shown(smoke):
    line = "RuntimeError: Triton dequant kernels require CUDA tensors"
    r = smoke("--serve-cmd", fault_cmd("engine-error", "--error", line), "--cases", "math", *FAST)
    assert r.code == 1
    assert r.finding_ids() == ["triton-needs-cuda", "engine-dead"]
    assert r.run["findings"][0]["evidence"].endswith(line)
    assert line in r.case("math")["root_cause"]["headline"]
    assert line in r.junit_failure("math").attrib["message"]


def test_a_server_that_dies_during_a_case_is_blamed_on_that_case(smoke):
    """The engine dies on math's request, the API server exits (code 0) half a second later."""
    r = smoke("--serve-cmd", fault_cmd("engine-dead"), "--cases", "models,math,qa,json", *FAST)
    assert r.code == 1
    death = r.run["server_death"]
    assert death["during_case"] == "math"
    assert death["exit_code"] == 0
    assert death["message"] == "server exited with exit code 0 during case math"
    assert r.verdicts() == {"models": "pass", "math": "fail", "qa": "error", "json": "error"}
    assert r.case("qa")["message"] == "not run: server exited with exit code 0 during case math"
    assert UNKNOWN in death["root_cause"]["text"]
    assert UNKNOWN in r.case("qa")["root_cause"]["headline"]
    assert r.run["crashed"]
    assert "server-crash" in r.finding_ids()
    assert "**Server died:** server exited with exit code 0 during case math" in (r.out / "summary.md").read_text()


def test_a_slow_death_names_the_case_running_and_the_first_failing_one(smoke):
    """It exits only while the next case runs: that case is named, and the one where it began to fail."""
    r = smoke("--serve-cmd", fault_cmd("engine-dead", "--die-after", "2"), "--cases", "models,math,qa,json", *FAST)
    assert r.code == 1
    death = r.run["server_death"]
    assert death["during_case"] == "qa"
    assert death["failing_since"] == "math"
    assert death["message"].startswith("server exited with exit code 0 during case qa (failing since case math: "
                                       "HTTP 500: EngineCore encountered an issue")


def test_a_server_killed_by_a_signal_says_which(smoke):
    r = smoke("--serve-cmd", fault_cmd("segv-first"), "--cases", "models,first,math", *FAST)
    assert r.code == 1
    assert r.run["server_exit_code"] == -11
    assert r.run["server_exit_status"] == "signal SIGSEGV (11)"
    assert r.run["server_death"]["message"] == "server was killed by signal SIGSEGV (11) during case first"
    assert "Segmentation fault" in r.case("first")["root_cause"]["text"]
    assert r.finding_ids() == ["server-crash"]


def test_older_vllm_flat_error_body_is_shown(smoke):
    r = smoke("--serve-cmd", fault_cmd("flat-error"), "--cases", "math", *FAST)
    assert r.code == 1
    assert r.case("math")["message"] == ("HTTP 500: Sampling failed: probability tensor contains either inf, nan "
                                         "or element < 0")
    assert r.finding_ids() == ["server-error"]


def test_nan_model_output_fails_the_first_case(smoke):
    r = smoke("--serve-cmd", fault_cmd("nan"), "--cases", "models,first", *FAST)
    assert r.code == 1
    assert r.verdicts() == {"models": "pass", "first": "fail"}
    assert "degenerate output: only punctuation" in r.case("first")["message"]
    assert r.finding_ids() == ["wrong-output"]


def test_the_terminal_shows_why_the_server_did_not_start(tmp_path):
    """Without --json: the cause from server.log is printed, not only "exited before it was ready"."""
    lock = write_test_lock(tmp_path / "lock", {"model": "some-model", "cases": ["models"]},
                           python=sys.executable)
    proc = subprocess.run([sys.executable, "-m", "toolchain", "smoke", "--lock", str(lock), "--no-install",
                           "--port", str(free_port()), "--out", str(tmp_path / "out"), "--ready-timeout", "60"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    shown = " ".join((proc.stdout + proc.stderr).split())  # as wrapped for the terminal
    assert "before it was ready" in shown
    assert "No module named 'vllm'" in shown  # this interpreter has no vLLM
    assert "No module named 'vllm'" in (tmp_path / "out" / "summary.md").read_text()
