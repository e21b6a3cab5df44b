"""`run_smoke()`: the whole smoke stage as a library call (the CLI and `toolchain bisect --test smoke` use it).

Order: (a container lock: the serving container) → device check → wheel hashes → fresh venv → install in
lock order → installed versions; any mismatch stops before anything is served (and still writes the
reports). Then the regression set, or the ladder. A container started for the run is removed at the end.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from toolchain import __version__
from toolchain.console import UI
from toolchain.core.redact import redact_env
from toolchain.errors import ToolError, UsageError
from toolchain.lock import Lock, verify_wheels
from toolchain.smoke import devices, install, report
from toolchain.smoke.config import SmokeConfig, build_config
from toolchain.smoke.container_target import ContainerTarget, spec_from_lock
from toolchain.smoke.ladder import LadderResult, run_ladder
from toolchain.smoke.runner import RunResult, run_set
from toolchain.smoke.triage import load_signatures


@dataclass(frozen=True)
class SmokeOptions:
    """What the command line can change; every field left empty comes from the lock's [smoke]."""
    device: str = ""
    skip_device_check: bool = False
    ladder: bool = False
    serve_cmd: str = ""
    model: str = ""
    host: str = "127.0.0.1"
    port: int = 0
    tensor_parallel_size: int = 0
    cases: tuple[str, ...] = ()
    ready_timeout: float = 0.0
    request_timeout: float = 0.0
    no_install: bool = False
    python: str = ""
    venv: Path | None = None


@dataclass(frozen=True)
class SmokeOutcome:
    passed: bool
    exit_code: int
    summary: str                       # one line: what passed, or what broke first
    report: dict[str, Any]             # what report.json holds
    paths: dict[str, Path]             # report, summary, junit
    runs: tuple[RunResult, ...] = ()
    ladder: LadderResult | None = field(default=None)


def run_smoke(lock: Lock | None, *, out_dir: Path | None = None, ui: UI | None = None,
              options: SmokeOptions | None = None) -> SmokeOutcome:
    ui = ui or UI(quiet=True)
    opts = options or SmokeOptions()
    if lock is None and not opts.serve_cmd:
        raise UsageError("smoke needs a lock (or a serve command to drive a server without one)",
                         hint="toolchain smoke --lock dist/NAME/stack.lock.toml --device b70")
    started = time.monotonic()
    out = (out_dir or _default_out(lock)).resolve()
    target, base_python = _target(opts, lock, out, ui)
    config = build_config(opts, lock.smoke if lock else {}, target.python,
                          where=f"{lock.path} [smoke]" if lock else "[smoke]")
    out.mkdir(parents=True, exist_ok=True)
    rep: dict[str, Any] = {
        "tool": "toolchain smoke", "tool_version": __version__,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "lock": str(lock.path) if lock else None, "recipe": lock.recipe_name if lock else None, "out": str(out),
        "config": {**config.to_dict(), "env": redact_env(dict(config.env))},
    }
    with contextlib.ExitStack() as stack:
        try:
            if isinstance(target, ContainerTarget):
                ui.step(f"starting the serving container ({target.kind}, "
                        f"{target.spec.container or target.spec.image})")
                stack.enter_context(target.serving(config.port))
                rep["target"] = target.to_dict()
                ui.info(f"target: {target.name}")
            rep["device"] = _check_devices(opts, config, target).to_dict()
            ui.info(f"device: {rep['device']['message']}")
            target = _prepare(lock, target, base_python, out, ui, rep)
        except ToolError as err:
            rep.update(verdict="fail", exit_code=err.return_code, error=str(err), seconds=time.monotonic() - started)
            report.write_all(out, rep)
            raise
        runs, ladder = _serve_and_test(opts, config, target, out, ui)
    passed = not ladder.first_broken if ladder else runs[0].passed
    rep.update(verdict="pass" if passed else "fail", exit_code=0 if passed else 1,
               seconds=round(time.monotonic() - started, 3), runs=[r.to_dict() for r in runs],
               ladder=ladder.to_dict() if ladder else None)
    paths = report.write_all(out, rep)
    if passed:
        summary = f"every required case passed ({len(runs)} run(s))"
    else:
        summary = f"ladder breaks at {ladder.first_broken}: {ladder.how}" if ladder else runs[0].how()
    return SmokeOutcome(passed, 0 if passed else 1, summary, rep, paths, tuple(runs), ladder)


def _default_out(lock: Lock | None) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return (lock.path.parent / "smoke" / stamp) if lock else Path("smoke-reports") / stamp


def _target(opts: SmokeOptions, lock: Lock | None, out: Path,
            ui: UI) -> tuple[install.HostEnv | ContainerTarget, str | None]:
    """Where to serve from, and the interpreter to make a fresh venv from (None: nothing to install)."""
    install_wheels = lock is not None and bool(lock.components) and not opts.no_install
    if lock is not None and (lock.target.runtime or "host") != "host":
        if opts.venv is not None:
            raise UsageError(f"--venv is a path on this machine, but {lock.path} was built in a "
                             f"{lock.target.runtime} container: the venv goes inside it",
                             hint="drop --venv")
        spec = spec_from_lock(lock, opts.python)
        target = ContainerTarget(spec, locked_digest=lock.target.image_digest, ui=ui, venv=install_wheels,
                                 wheels=lock.wheels_dir if install_wheels else None)
        return target, (spec.python if install_wheels else None)
    if install_wheels:
        venv = (opts.venv or out / "venv").resolve()
        return install.HostEnv(python=str(venv / "bin" / "python"), venv=str(venv)), \
            opts.python or lock.target.python or sys.executable
    python = opts.python or (lock.target.python if lock else "") or sys.executable
    return install.HostEnv(python=python), None


def _check_devices(opts: SmokeOptions, config: SmokeConfig,
                   target: install.HostEnv | ContainerTarget) -> devices.DeviceCheck:
    mask = config.env.get("ZE_AFFINITY_MASK", "")
    if not config.device:
        return devices.DeviceCheck("", config.tensor_parallel_size, mask, (), True, "no device requested", True)
    if opts.skip_device_check:
        return devices.skipped(config.device, config.tensor_parallel_size, mask)
    if isinstance(target, ContainerTarget):
        return target.device_check(config.device, config.tensor_parallel_size, mask)
    cards = devices.find_cards() or devices.xpu_smi_cards()
    check = devices.check(config.device, config.tensor_parallel_size, mask, cards, devices.tool_reports())
    if not check.ok:
        raise devices.DeviceMismatch(check.message, hint="pick the --device and tensor-parallel-size that match the "
                                     "cards, or pass --skip-device-check to run without them")
    return check


def _prepare(lock: Lock | None, target: install.Target, base_python: str | None, out: Path, ui: UI,
             rep: dict[str, Any]) -> install.Target:
    """Hashes, fresh venv, install in lock order, version check; fills rep["install"] as it goes."""
    if lock is None or not lock.components:
        return target
    log = out / "install.log"
    info: dict[str, Any] = {"python": target.python, "log": str(log), "steps": [], "versions": []}
    rep["install"] = info
    if base_python is not None:
        ui.step(f"verifying {len(lock.components)} wheel(s) against {lock.path}")
        verify_wheels(lock)
        ui.step(f"creating a fresh venv {target.venv} from {base_python}"
                + (f" in the {target.name}" if isinstance(target, ContainerTarget) else ""))
        target = target.make_venv(base_python, log)
        info["steps"] = [s.to_dict() for s in install.install_plan(lock)]
        install.install(lock, target, log, progress=lambda s: ui.step(
            f"installing {s.component}: {s.wheel.name} {' '.join(s.args)}".rstrip()))
    checks = install.check_versions(lock, target, log)
    info["versions"] = [c.to_dict() for c in checks]
    install.require_versions(checks, f"{target.python} in the {target.name}"
                             if isinstance(target, ContainerTarget) else target.python)
    info["environment"] = install.environment(lock, target, log)
    if base_python is not None:
        install.require_environment(info["environment"], target.python)
    ui.info(f"installed versions match the lock ({len(checks)} package(s))")
    return target


def _serve_and_test(opts: SmokeOptions, config: SmokeConfig, target: install.Target, out: Path,
                    ui: UI) -> tuple[list[RunResult], LadderResult | None]:
    signatures = load_signatures()

    def run_one(name: str, argv: list, env: dict) -> RunResult:
        return run_set(config, name=name, argv=argv, env=env, out_dir=out / name, target=target, ui=ui,
                       signatures=signatures)

    if opts.ladder:
        ladder = run_ladder(config.serve_argv, config.env, config.ladder, run_one)
        return [r for _, r in ladder.steps if r is not None], ladder
    return [run_one("smoke", list(config.serve_argv), dict(config.env))], None
