"""One pass of the regression set against one server: start, wait, run the cases, stop, triage."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.console import UI
from toolchain.core.proc import display, merge_env
from toolchain.core.redact import redact_env
from toolchain.errors import UsageError
from toolchain.smoke import cases as cases_mod
from toolchain.smoke.server import Readiness, Server, ServeSpec, strip_oneapi
from toolchain.smoke.triage import Finding, Signature, triage

if TYPE_CHECKING:
    from toolchain.smoke.config import SmokeConfig
    from toolchain.smoke.install import Target

EXIT_GRACE = 3.0  # after a connection failure, how long a dying server gets to show its exit code

EVENT_PREFIX = {"timeout": "request timed out", "output": "wrong output", "http": "HTTP error",
                "protocol": "malformed response", "connection": "connection failed", "restart": "restart failed"}


@dataclass(frozen=True)
class RunResult:
    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str]           # what the run added to the environment (secrets redacted)
    stripped: tuple[str, ...]        # oneAPI variables removed or changed
    ready: Readiness
    cases: tuple[cases_mod.CaseResult, ...]
    findings: tuple[Finding, ...]
    events: tuple[str, ...]
    log: Path
    server_exit: int | None
    crashed: bool
    seconds: float

    @property
    def oom(self) -> bool:
        return any("oom" in f.marks for f in self.findings)

    @property
    def failed(self) -> list[cases_mod.CaseResult]:
        return [c for c in self.cases if c.required and not c.passed]

    @property
    def passed(self) -> bool:
        return self.ready.ok and not self.failed

    def how(self) -> str:
        """One line: what broke and the first diagnosis."""
        parts = [] if self.ready.ok else [self.ready.reason]
        parts += [f"{c.name} {c.verdict}: {c.message}" for c in self.failed if c.category != "not-run"]
        if self.findings:
            parts.append(f"triage: {self.findings[0].id} ({self.findings[0].title})")
        return "; ".join(parts) or "passed"

    def to_dict(self) -> dict:
        return {"name": self.name, "passed": self.passed, "argv": list(self.argv), "env": dict(self.env),
                "stripped_oneapi_vars": list(self.stripped), "ready": self.ready.to_dict(),
                "server_log": str(self.log), "server_exit_code": self.server_exit, "crashed": self.crashed,
                "oom": self.oom, "seconds": round(self.seconds, 3), "events": list(self.events),
                "findings": [f.to_dict() for f in self.findings], "cases": [c.to_dict() for c in self.cases]}


def serve_env(target: Target, env: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """The server's environment: ours + the target's + the run's, with every oneAPI trace removed."""
    return strip_oneapi(merge_env(os.environ, target.serve_env(), env))


def run_set(config: SmokeConfig, *, name: str, argv: Sequence[str], env: Mapping[str, str], out_dir: Path,
            target: Target, ui: UI, signatures: Sequence[Signature]) -> RunResult:
    if _answers(config.host, config.port):
        raise UsageError(f"port {config.port} on {config.host} is already in use; smoke would talk to that server",
                         hint="stop it or pass another --port")
    started = time.monotonic()
    full_env, stripped = serve_env(target, env)
    log = out_dir / "server.log"
    server = Server(ServeSpec(tuple(argv), full_env, config.base_url, log, config.ready_timeout), target.launch)
    events: list[str] = []
    with server:
        ui.step(f"[{name}] serve: {display(argv)}")
        server.start()
        with ui.status(f"[{name}] waiting for {config.base_url} (up to {config.ready_timeout:g}s)"):
            ready = server.wait_ready()
        if ready.ok:
            ui.info(f"[{name}] ready after {ready.seconds:.1f}s")
            results, stop_reason = _run_cases(config, server, name, events, ui)
            verdict = cases_mod.ERROR
        else:
            events.append(f"harness: {ready.reason}")
            ui.info(f"[{name}] [red]{ready.reason}[/]")
            results, stop_reason, verdict = [], ready.reason, cases_mod.SKIP
        results += [cases_mod.not_run(s, f"not run: {stop_reason}", verdict) for s in config.cases[len(results):]]
        crashed = server.crashed
        server.stop()
    result = RunResult(name, tuple(argv), redact_env(dict(env)), stripped, ready, tuple(results), (), tuple(events),
                       log, server.exit_code, crashed, time.monotonic() - started)
    if result.passed:
        return result
    bodies = [e.response for c in results for e in c.exchanges if e.status not in (None, 200)]
    return replace(result, findings=tuple(triage(signatures, log=server.log_text(), responses=bodies, events=events)))


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _run_cases(config: SmokeConfig, server: Server, name: str, events: list[str],
               ui: UI) -> tuple[list[cases_mod.CaseResult], str]:
    """Run the cases in order; stop when the server is gone. Returns the results and why it stopped."""
    ctx = cases_mod.CaseContext(cases_mod.Client(config.base_url, config.model, config.request_timeout),
                                restart=server.restart)
    results = []
    for spec in config.cases:
        with ui.status(f"[{name}] case {spec.name}"):
            result = cases_mod.run_case(spec, ctx)
        results.append(result)
        colour = "green" if result.passed else ("yellow" if not result.required else "red")
        ui.info(f"[{name}] {spec.name}: [{colour}]{result.verdict}[/] ({result.seconds:.1f}s) {result.message}")
        if result.category in EVENT_PREFIX:
            events.append(f"harness: {EVENT_PREFIX[result.category]} in case {spec.name}: {result.message}")
        if result.category == "restart":
            reason = result.message.split(": ", 1)[-1]
            events.append(f"harness: {reason}")
            return results, reason
        if result.category == "connection":
            server.wait_exit(EXIT_GRACE)
        if not server.alive():
            events.append(f"harness: server exited with code {server.exit_code} during case {spec.name}")
            return results, f"server exited with code {server.exit_code} during case {spec.name}"
    return results, ""
