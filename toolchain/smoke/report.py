"""Reports from the report dict: `report.json` (everything, raw), `summary.md` (a table to read at a
glance) and `junit.xml` (for CI). The Markdown and JUnit files are derived from the same dict."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolchain.core.fs import atomic_write_text

REPORT = "report.json"
SUMMARY = "summary.md"
JUNIT = "junit.xml"
NOTE_CHARS = 120


def write_all(out: Path, report: Mapping[str, Any]) -> dict[str, Path]:
    """Write a smoke report as report.json, a Markdown summary and JUnit XML into `out`; their paths."""
    paths = {"report": out / REPORT, "summary": out / SUMMARY, "junit": out / JUNIT}
    atomic_write_text(paths["report"], json.dumps(report, indent=2, sort_keys=False, default=str) + "\n")
    atomic_write_text(paths["summary"], markdown(report))
    atomic_write_text(paths["junit"], junit(report))
    return paths


def _flat(text: object, n: int) -> str:
    """One line of at most n characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= n else line[: n - 1] + "…"


def _cell(text: object, n: int = NOTE_CHARS) -> str:
    return _flat(text, n).replace("|", "\\|")


def _secs(value: object) -> str:
    return f"{value:.1f}s" if isinstance(value, (int, float)) else ""


def markdown(report: Mapping[str, Any]) -> str:
    """The smoke report as a Markdown summary (the verdict, each run and its cases)."""
    verdict = str(report.get("verdict", "fail")).upper()
    head = f"# toolchain smoke: {verdict}"
    if report.get("recipe"):
        head += f" — recipe `{report['recipe']}`"
    lines = [head, ""]
    stop = report.get("interrupted")
    if stop:
        running = f" while case `{stop['running']}` was running" if stop.get("running") else \
            f" while {'serving' if stop.get('stage') == 'serve' else 'preparing'}"
        lines += [f"**Interrupted by {stop['signal']}**{running}: a partial report of the {stop['cases_run']} "
                  "case(s) that ran; the server's process group was stopped.", ""]
    if report.get("lock"):
        lines.append(f"- lock: `{report['lock']}`")
    dev = report.get("device") or {}
    if dev:
        lines.append(f"- device: {dev.get('device') or 'none requested'}: {dev.get('message', '')}")
    inst = report.get("install") or {}
    if inst.get("versions") or inst.get("steps"):
        bad = [v for v in inst.get("versions", []) if not v.get("ok")]
        how = (" from the index, UNLOCKED (--allow-unlocked-deps)" if inst.get("unlocked") else
               " exactly the lock's files (sha256 required, no index)" if "unlocked" in inst else "")
        lines.append(f"- install: {len(inst.get('steps', []))} file(s){how} into `{inst.get('python')}`; the versions "
                     f"there " + ("match the lock" if not bad else "DIFFER: " + ", ".join(
                         f"{v['dist']} {v['installed']} != {v['locked']}" for v in bad)))
    if inst.get("venv_state"):
        lines.append(f"- venv: {inst['venv_state']}")
    served = report.get("served")
    if served:
        if served.get("same_as_verified"):
            lines.append(f"- served: `{served['program']}`, from the environment whose versions were checked")
        elif served.get("verified"):
            lines.append(f"- served: `{served['program']}` — **not** the checked environment "
                         f"`{served['verified']}`: the version check says nothing about what was served")
        else:
            lines.append(f"- served: `{served['program']}` (no versions were checked)")
    env = inst.get("environment") or {}
    if env:
        lines += ["", "## Environment (installed against the lock)", "",
                  "| distribution | role | locked | installed | sha256 | state |", "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {r['name']} | {r['role']} | {r['locked']} | {r['installed'] or ''} | "
                  f"{(r['installed-sha256'] or r['locked-sha256'])[:16]} | {r['state']} |" for r in env["locked"]]
        lines += [f"| {r['name']} | (not locked) | | {r['installed']} | {(r['installed-sha256'] or '')[:16]} | "
                  f"{r['state']} |" for r in env.get("other", [])]
        if inst.get("unlocked"):
            lines += ["", "**Unlocked:** the lock records no resolved closure, and its dependencies were installed "
                          "from the index, unpinned and unchecked (--allow-unlocked-deps): another run may test "
                          "another stack (`toolchain lock --lock LOCK` pins them)."]
        elif not env.get("resolved"):
            lines += ["", "The lock records no resolved closure: its dependencies were not pinned "
                          "(`toolchain lock --lock LOCK` pins them)."]
    host = report.get("host") or {}
    if host:
        lines += ["", "## Host (the box served on)", ""]
        lines += [f"- {k}: {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in host.items()
                  if v not in ("", [], 0)]
    native = report.get("native")
    if native:
        lines.append(f"- native libraries: {native['shared-objects']} shared object(s) in {native['wheels']} "
                     f"wheel(s), every soname what loads them needs is there")
        if native.get("host-present"):
            lines.append(f"- host libraries present: {', '.join(native['host-present'])}")
        lines += [f"- host library absent: {a['soname']} (brought by {a['brings-it'] or 'its package'})"
                  for a in native.get("host-absent", [])]
    if report.get("error"):
        lines += ["", f"**Stopped before serving:** {_cell(report['error'], 2000)}"]
    ladder = report.get("ladder")
    if ladder:
        lines += ["", "## Ladder", "", "| step | adds | verdict |", "| --- | --- | --- |"]
        lines += [f"| {s['name']} | {_cell(s['title'])} | {s['verdict']} |" for s in ladder["steps"]]
        lines += ["", f"First step that breaks: **{ladder['first_broken']}** — {_cell(ladder['how'], 2000)}"
                  if ladder.get("first_broken") else "Every step passes."]
    for run in report.get("runs", []):
        lines += _run_markdown(run)
    lines += ["", f"Raw requests, responses and timings: `{REPORT}`; exit code {report.get('exit_code')}.", ""]
    return "\n".join(lines)


def _run_markdown(run: Mapping[str, Any]) -> list[str]:
    ready = run["ready"]
    state = f"ready after {ready['seconds']:.1f}s" if ready["ok"] else f"NOT READY: {ready['reason']}"
    marks = [m for m, on in (("CRASH", run.get("crashed")), ("OOM", run.get("oom"))) if on]
    verdict = f"INTERRUPTED ({run['interrupted']})" if run.get("interrupted") else ("PASS" if run["passed"] else "FAIL")
    lines = ["", f"## Run `{run['name']}`: {verdict} — {state}"
             + (f" — {', '.join(marks)}" if marks else ""), "",
             f"Server log: `{run['server_log']}`", ""]
    death = run.get("server_death")
    if death:
        lines += [f"**Server died:** {_cell(death['message'], 2000)}", ""]
    lines += ["| case | verdict | required | time | latency | note |", "| --- | --- | --- | --- | --- | --- |"]
    for c in run["cases"]:
        lines.append(f"| {c['name']} | {c['verdict'].upper()} | {'yes' if c['required'] else 'no'} | "
                     f"{_secs(c['seconds'])} | {_secs(c['metrics'].get('latency_seconds'))} | {_cell(c['message'])} |")
    lines += _root_causes(run)
    if run.get("findings"):
        lines += ["", "Triage:"]
        for f in run["findings"]:
            fixes = "; ".join(_fix_text(x) for x in f["fixes"])
            lines.append(f"- **{f['id']}** {f['title']}: {f['diagnosis']} Seen: `{_cell(f['evidence'], 200)}`. "
                         f"Try: {fixes}")
    return lines


def _root_causes(run: Mapping[str, Any]) -> list[str]:
    """Each distinct root-cause excerpt once, with what it explains (the start, the death, the cases)."""
    shown: dict[str, list[str]] = {}
    if not run["ready"]["ok"] and run.get("root_cause"):
        shown.setdefault(run["root_cause"]["text"], []).append("start-up")
    death = run.get("server_death") or {}
    if death.get("root_cause"):
        shown.setdefault(death["root_cause"]["text"], []).append("server death")
    for c in run["cases"]:
        if c["verdict"] != "pass" and c.get("root_cause"):
            shown.setdefault(c["root_cause"]["text"], []).append(f"`{c['name']}`")
    lines: list[str] = []
    if shown:
        lines += ["", "Root cause (from the log):"]
        for text, what in shown.items():
            lines += ["", f"- {', '.join(what)}:", "", "```text", text, "```"]
    return lines


def _fix_text(fix: Mapping[str, Any]) -> str:
    what = " ".join(f"{k}={v}" for k, v in fix.get("env", {}).items()) or " ".join(fix.get("args", []))
    return f"{fix['kind']} `{what}` ({fix['text']})" if what else f"{fix['kind']}: {fix['text']}"


def junit(report: Mapping[str, Any]) -> str:
    """The smoke report as JUnit XML: a test suite for the install and one per run, a test case per case."""
    suites = ET.Element("testsuites", name="toolchain smoke")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    if report.get("install") or report.get("error"):
        suite = _suite(suites, "install")
        inst = report.get("install") or {}
        for v in inst.get("versions", []):
            case = ET.SubElement(suite, "testcase", classname="smoke.install", name=v["dist"], time="0")
            if not v["ok"]:
                ET.SubElement(case, "failure", message=f"installed {v['installed']}, the lock has {v['locked']}",
                              type="version")
        if report.get("error"):
            case = ET.SubElement(suite, "testcase", classname="smoke.install", name="prepare", time="0")
            ET.SubElement(case, "error", message=_cell(report["error"], 500), type="prepare").text = report["error"]
        _count(suite, totals)
    for run in report.get("runs", []):
        suite = _suite(suites, run["name"])
        ET.SubElement(ET.SubElement(suite, "properties"), "property", name="serve-argv",
                      value=" ".join(run["argv"]))
        ready = ET.SubElement(suite, "testcase", classname=f"smoke.{run['name']}", name="ready",
                              time=f"{run['ready']['seconds']:.3f}")
        run_cause = run.get("root_cause")
        if not run["ready"]["ok"]:
            ET.SubElement(ready, "failure", message=_with_cause(run["ready"]["reason"], run_cause),
                          type="not-ready").text = run["ready"]["reason"] + _cause_text(run_cause)
        triage_text = "\n".join(f"{f['id']}: {f['title']} -- {f['evidence']}" for f in run.get("findings", []))
        for c in run["cases"]:
            case = ET.SubElement(suite, "testcase", classname=f"smoke.{run['name']}", name=c["name"],
                                 time=f"{c['seconds']:.3f}")
            if c["verdict"] == "pass":
                pass
            elif c["verdict"] == "skip" or not c["required"]:
                note = c["message"] if c["required"] else f"optional case {c['verdict']}: {c['message']}"
                ET.SubElement(case, "skipped", message=_cell(note, 500))
            else:
                tag = "error" if c["verdict"] == "error" else "failure"
                cause = c.get("root_cause")
                ET.SubElement(case, tag, message=_with_cause(c["message"], cause),
                              type=c["category"] or c["verdict"]).text = \
                    (c["message"] + _cause_text(cause) + ("\n\ntriage:\n" + triage_text if triage_text else ""))
            if c["exchanges"]:
                ET.SubElement(case, "system-out").text = json.dumps(c["exchanges"], indent=1)[:20000]
        _count(suite, totals)
    for k, v in totals.items():
        suites.set(k, str(v))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _with_cause(message: str, cause: Mapping[str, Any] | None) -> str:
    """A JUnit message: what failed, then the exception lines behind it (CI shows only this line)."""
    text = message if not cause else f"{_flat(message, 400)} — root cause: {cause['headline']}"
    return _flat(text, 1200)


def _cause_text(cause: Mapping[str, Any] | None) -> str:
    return f"\n\nroot cause:\n{cause['text']}" if cause else ""


def _suite(parent: ET.Element, name: str) -> ET.Element:
    return ET.SubElement(parent, "testsuite", name=name)


def _count(suite: ET.Element, totals: dict[str, int]) -> None:
    cases = suite.findall("testcase")
    counts = {"tests": len(cases), "failures": sum(1 for c in cases if c.find("failure") is not None),
              "errors": sum(1 for c in cases if c.find("error") is not None),
              "skipped": sum(1 for c in cases if c.find("skipped") is not None)}
    time = sum(float(c.get("time", "0")) for c in cases)
    for k, v in counts.items():
        suite.set(k, str(v))
        totals[k] += v
    suite.set("time", f"{time:.3f}")
