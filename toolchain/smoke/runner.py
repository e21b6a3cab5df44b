"""One pass of the regression set against one server: start, wait, run the cases, stop, triage."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from toolchain.console import UI
from toolchain.core.proc.background import exit_status
from toolchain.core.proc.runner import display, merge_env
from toolchain.core.proc.signals import Interrupted
from toolchain.core.record import field, record, replace
from toolchain.core.redact import redact_env
from toolchain.core.serial import Data, empty_as_null, meta, rounded, to_table
from toolchain.errors import UsageError
from toolchain.smoke import cases as cases_mod
from toolchain.smoke import rootcause
from toolchain.smoke.rootcause import Excerpt, render
from toolchain.smoke.server import Readiness, Server, ServeSpec, ended, strip_oneapi
from toolchain.smoke.triage import Finding, Signature, triage

if TYPE_CHECKING:
    from toolchain.smoke.config import SmokeConfig
    from toolchain.target import Interpreter

EXIT_GRACE = 3.0   # after a connection failure, how long a dying server gets to show its exit
DYING_GRACE = 1.0  # after an HTTP 5xx, how long to watch whether the server goes down with it
INTERRUPT_GRACE = 4.0  # stopping the server after a stop request (SIGINT, then SIGTERM, then SIGKILL)

EVENT_PREFIX = {"timeout": "request timed out", "output": "wrong output", "http": "HTTP error",
                "protocol": "malformed response", "connection": "connection failed", "restart": "restart failed"}
# Failures that point at the server rather than at its answer: their root cause is looked for in the whole
# log of the current start when the case's own part of the log has none.
SERVER_SIDE = frozenset({"http", "connection", "timeout", "restart", "protocol"})


@record
class ServerDeath:
    """The server went away while the cases ran: which case was running, and since when it was failing."""
    status: int = field(metadata=meta(key="exit_code"))  # its exit status (< 0: the signal that ended it)
    # the case that was running when it exited
    during: str = field(metadata=meta(key="during_case"))
    # it exited after `during` had finished, before the next one
    after: bool = field(metadata=meta(key="after_case"))
    # the first case of the failures that ended with its exit ("": none, written null)
    failing_since: str = field(metadata=meta(dump=empty_as_null))
    since_message: str = field(metadata=meta(skip=True))  # (in `message`)
    excerpts: tuple[Excerpt, ...] = field(metadata=meta(key="root_cause", dump=cases_mod.root_cause_data))

    def message(self) -> str:
        """A line saying how the server ended and during or after which case."""
        when = f"after case {self.during}" if self.after else f"during case {self.during}"
        text = f"server {ended(self.status)} {when}"
        if self.failing_since and self.failing_since != self.during:
            text += f" (failing since case {self.failing_since}: {self.since_message})"
        return text

    def to_dict(self) -> dict[str, Data]:
        """The report's table: the fields, how the server ended in words, and the message."""
        return {**to_table(self), "exit_status": exit_status(self.status), "message": self.message()}


def _own_table(value: Readiness | ServerDeath | None) -> Data:
    return None if value is None else value.to_dict()


def _own_tables(values: tuple[cases_mod.CaseResult, ...]) -> Data:
    return [v.to_dict() for v in values]


@record
class RunResult:
    """One server run of a smoke test: the argv and environment, readiness, case results and how it ended."""
    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str | None]    # what the run added to the environment (secrets redacted)
    # oneAPI variables removed or changed
    stripped: tuple[str, ...] = field(metadata=meta(key="stripped_oneapi_vars"))
    ready: Readiness = field(metadata=meta(dump=_own_table))
    cases: tuple[cases_mod.CaseResult, ...] = field(metadata=meta(dump=_own_tables))
    findings: tuple[Finding, ...]
    events: tuple[str, ...]
    log: Path = field(metadata=meta(key="server_log"))
    server_exit: int | None = field(metadata=meta(key="server_exit_code"))
    crashed: bool
    seconds: float = field(metadata=meta(dump=rounded(3)))
    death: ServerDeath | None = field(default=None, metadata=meta(key="server_death", dump=_own_table))
    # root cause of a start that never became ready (written as the run's `root_cause`)
    cause: tuple[Excerpt, ...] = field(default=(), metadata=meta(skip=True))
    # the signal that stopped the run ("SIGTERM"), "" (written null) when it ran to the end
    interrupted: str = field(default="", metadata=meta(dump=empty_as_null))

    @property
    def oom(self) -> bool:
        """Whether a finding in the logs marks the run as out of memory."""
        return any("oom" in f.marks for f in self.findings)

    @property
    def failed(self) -> list[cases_mod.CaseResult]:
        """The required cases that did not pass."""
        return [c for c in self.cases if c.required and not c.passed]

    @property
    def passed(self) -> bool:
        """Whether the server became ready, every required case passed and nothing interrupted the run."""
        return self.ready.ok and not self.failed and not self.interrupted

    @property
    def root_cause(self) -> tuple[Excerpt, ...]:
        """The excerpt that explains the run's first failure (start-up, server death, or the first case)."""
        if self.cause:
            return self.cause
        if self.death is not None and self.death.excerpts:
            return self.death.excerpts
        return next((c.excerpts for c in self.failed if c.excerpts), ())

    def how(self) -> str:
        """One line: what broke and the first diagnosis."""
        if self.interrupted:
            ran = [c.name for c in self.cases if c.category not in ("not-run", "interrupted")]
            return f"interrupted by {self.interrupted} after {len(ran)} case(s)" + (f" ({', '.join(ran)})" if ran else "")
        parts = [] if self.ready.ok else [self.ready.reason]
        if self.death is not None:
            parts.append(self.death.message())
        parts += [f"{c.name} {c.verdict}: {c.message}" for c in self.failed if c.category != "not-run"]
        if self.findings:
            parts.append(f"triage: {self.findings[0].id} ({self.findings[0].title})")
        return "; ".join(parts) or "passed"

    def to_dict(self) -> dict[str, Data]:
        """report.json's run: the fields, and what is computed from them (passed, oom, the root cause)."""
        return {**to_table(self), "passed": self.passed, "oom": self.oom,
                "server_exit_status": None if self.server_exit is None else exit_status(self.server_exit),
                "root_cause": cases_mod.root_cause_data(self.root_cause)}

class RunInterrupted(Interrupted):
    """A stop request arrived during a run; `result` holds what ran (the server is already stopped)."""

    def __init__(self, signum: int, result: RunResult) -> None:
        super().__init__(signum)
        self.result = result


def serve_env(py: Interpreter, env: Mapping[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """The server's environment: ours + the runtime's for `py` + the run's, with every oneAPI trace removed."""
    return strip_oneapi(merge_env(os.environ, py.runtime.serve_env(py), env))


@dataclass
class _Progress:
    """What a run has done so far (kept outside the loop so that an interrupted run can still report it)."""
    results: list[cases_mod.CaseResult]
    events: list[str]
    ready: Readiness | None = None
    death: ServerDeath | None = None
    cause: tuple[Excerpt, ...] = ()  # why the start never became ready
    stop_reason: str = ""


def run_set(config: SmokeConfig, *, name: str, argv: Sequence[str], env: Mapping[str, str], out_dir: Path,
            py: Interpreter, ui: UI, signatures: Sequence[Signature]) -> RunResult:
    """One pass of the set against a server started for it. A stop request (SIGINT/SIGTERM/SIGHUP) stops the
    server's whole process group and raises `RunInterrupted` with the cases that ran."""
    if _answers(config.host, config.port):
        raise UsageError(f"port {config.port} on {config.host} is already in use; smoke would talk to that server",
                         hint="stop it or pass another --port")
    started = time.monotonic()
    full_env, stripped = serve_env(py, env)
    log = out_dir / "server.log"
    server = Server(ServeSpec(tuple(argv), full_env, config.base_url, log, config.ready_timeout), py.runtime.serve)
    done = _Progress([], [])
    stop: Interrupted | None = None
    with server:
        try:
            _serve(config, server, name, done, ui)
        except KeyboardInterrupt as exc:
            stop = Interrupted.of(exc)
            ui.info(f"[{name}] [yellow]{stop.signame}: stopping the server[/]")
            server.stop(INTERRUPT_GRACE)
            done.events.append(f"harness: interrupted by {stop.signame}")
            if done.ready is None:
                done.ready = Readiness(False, time.monotonic() - started, f"interrupted by {stop.signame}")
            if done.ready.ok and len(done.results) < len(config.cases):
                spec = config.cases[len(done.results)]
                done.results.append(replace(cases_mod.not_run(spec, f"interrupted by {stop.signame} while running",
                                                              cases_mod.ERROR), category="interrupted"))
            done.stop_reason = f"interrupted by {stop.signame}"
        results = done.results
        verdict = cases_mod.ERROR if done.ready is not None and done.ready.ok else cases_mod.SKIP
        why = done.death.excerpts if done.death else done.cause  # what stopped the set explains the rest
        results += [replace(cases_mod.not_run(s, f"not run: {done.stop_reason}", verdict), excerpts=why)
                    for s in config.cases[len(results):]]
        crashed = server.crashed
        server.stop()
    ready = done.ready or Readiness(False, 0.0, "not started")
    result = RunResult(name, tuple(argv), redact_env(dict(env)), stripped, ready, tuple(results), (),
                       tuple(done.events), log, server.exit_code, crashed, time.monotonic() - started,
                       done.death, done.cause, stop.signame if stop else "")
    if stop is not None:
        raise RunInterrupted(stop.signum, result)
    if result.passed:
        return result
    bodies = [e.response for c in results for e in c.exchanges if e.status not in (None, 200)]
    log_text = rootcause.server_output(server.log_text())
    return replace(result, findings=tuple(triage(signatures, log=log_text, responses=bodies, events=done.events)))


def _serve(config: SmokeConfig, server: Server, name: str, done: _Progress, ui: UI) -> None:
    ui.step(f"[{name}] serve: {display(server.spec.argv)}")
    server.start()
    with ui.status(f"[{name}] waiting for {config.base_url} (up to {config.ready_timeout:g}s)"):
        done.ready = server.wait_ready()
    if done.ready.ok:
        ui.info(f"[{name}] ready after {done.ready.seconds:.1f}s")
        _run_cases(config, server, name, done, ui)
    else:
        done.events.append(f"harness: {done.ready.reason}")
        ui.info(f"[{name}] [red]{done.ready.reason}[/]")
        if done.ready.exit_code is not None:
            server.wait_exit(EXIT_GRACE)  # its last lines reach the log
        done.cause = _excerpts(server, server.start_offsets[-1], None, tail=True)
        if done.cause:
            ui.info(f"[{name}] root cause in {server.spec.log}:\n{escape(render(done.cause))}")
        done.stop_reason = done.ready.reason


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


@record
class _Window:
    started: float     # time.monotonic()
    ended: float
    log_from: int      # the case's part of server.log
    log_to: int


def _run_cases(config: SmokeConfig, server: Server, name: str, done: _Progress, ui: UI) -> None:
    """Run the cases in order; stop when the server is gone (saying which case was running)."""
    ctx = cases_mod.CaseContext(cases_mod.Client(config.base_url, config.model, config.request_timeout),
                                restart=server.restart)
    windows: list[_Window] = []
    for spec in config.cases:
        t0, log_from = time.monotonic(), server.log_offset()
        with ui.status(f"[{name}] case {spec.name}"):
            result = cases_mod.run_case(spec, ctx)
        if result.category == "connection":
            server.wait_exit(EXIT_GRACE)
        elif _server_error(result):
            server.wait_exit(DYING_GRACE)
        windows.append(_Window(t0, time.monotonic(), log_from, server.log_offset()))
        if not result.passed:
            result = replace(result, excerpts=_case_excerpts(server, result, windows[-1]))
        done.results.append(result)
        colour = "green" if result.passed else ("yellow" if not result.required else "red")
        ui.info(f"[{name}] {spec.name}: [{colour}]{result.verdict}[/] ({result.seconds:.1f}s) {escape(result.message)}")
        if result.excerpts and result.required:
            ui.info(f"[{name}] root cause in {server.spec.log}:\n{escape(render(result.excerpts))}")
        if result.category in EVENT_PREFIX:
            done.events.append(f"harness: {EVENT_PREFIX[result.category]} in case {spec.name}: {result.message}")
        if result.category == "restart":
            done.stop_reason = result.message.split(": ", 1)[-1]
            done.events.append(f"harness: {done.stop_reason}")
            return
        if not server.alive():
            done.death = _death(server, done.results, windows)
            done.events.append(f"harness: {done.death.message()}")
            done.stop_reason = done.death.message()
            ui.info(f"[{name}] [red]{escape(done.stop_reason)}[/]")
            return


def _server_error(result: cases_mod.CaseResult) -> bool:
    return result.category == "http" and any((e.status or 0) >= 500 for e in result.exchanges)


def _death(server: Server, results: list[cases_mod.CaseResult], windows: list[_Window]) -> ServerDeath:
    """Which case was running when the server exited, and the first case of the failures that led there."""
    exited = server.exited_at if server.exited_at is not None else windows[-1].ended
    i = max((k for k, w in enumerate(windows) if w.started <= exited), default=len(windows) - 1)
    after = exited > windows[i].ended
    first = i
    while first > 0 and _failed_on_server(results[first - 1]):
        first -= 1
    since = results[first]
    status = server.exit_code if server.exit_code is not None else 0
    excerpts = _excerpts(server, windows[first].log_from, None) or \
        _excerpts(server, server.start_offsets[-1], None, tail=True)
    return ServerDeath(status, results[i].name, after, since.name if not since.passed else "",
                       since.message, excerpts)


def _failed_on_server(result: cases_mod.CaseResult) -> bool:
    return not result.passed and result.category in SERVER_SIDE


def _case_excerpts(server: Server, result: cases_mod.CaseResult, window: _Window) -> tuple[Excerpt, ...]:
    """The root cause of a failed case: its own part of the log; for a server-side failure, else the nearest
    error before it since the server started."""
    own = _excerpts(server, window.log_from, window.log_to)
    if own or result.category not in SERVER_SIDE:
        return own
    return _excerpts(server, server.start_offsets[-1] if server.start_offsets else 0, window.log_to)


def _excerpts(server: Server, start: int, end: int | None, *, tail: bool = False) -> tuple[Excerpt, ...]:
    first_line = server.log_text(0, start).count("\n") + 1
    return tuple(rootcause.find(server.log_text(start, end), source=server.spec.log.name, first_line=first_line,
                                tail=tail))
