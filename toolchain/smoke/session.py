"""`run_smoke()`: the whole smoke stage as a library call (the CLI and `toolchain bisect --test smoke` use it).

Order: wheel hashes and the locked dependency files staged beside the lock → (a container lock: the serving
container) → device check → fresh venv → install exactly the lock (hashes required, no index; a lock without
a closure: its built wheels alone, unless --allow-unlocked-deps) → installed versions and environment against
the lock; any mismatch stops before anything is served (and still writes the reports). Then the regression set, or the ladder. A container started for the run is removed at the end.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import canonicalize_name

from toolchain import __version__
from toolchain.console import UI
from toolchain.core import toml as tomlio
from toolchain.core.fs import atomic_write_text
from toolchain.core.owned import OWNED_MARKER, check_ours, claim
from toolchain.core.proc.signals import Interrupted, interruptible
from toolchain.core.record import field, record
from toolchain.core.redact import redact_env
from toolchain.core.serial import to_data, to_table
from toolchain.errors import ToolError, UsageError
from toolchain.lock import Lock, verify_wheels, wheel_name_version
from toolchain.recipe.load import TargetSpec
from toolchain.recipe.model import SmokeSpec
from toolchain.recipe.validate import smoke_spec
from toolchain.smoke import device_check, install, report
from toolchain.smoke.config import SmokeConfig, SmokeOptions, build_config, port_of
from toolchain.smoke.ladder import LadderResult, run_ladder
from toolchain.smoke.rootcause import render
from toolchain.smoke.runner import RunInterrupted, RunResult, run_set
from toolchain.smoke.triage import load_signatures
from toolchain.target import HostRuntime, Interpreter, Serving, make_runtime, target_spec

if TYPE_CHECKING:
    from toolchain.target.base import ServeRuntime

SMOKE_MARKERS = (OWNED_MARKER, "report.json")  # a report folder smoke wrote (before its marker: its report)


@record(kw_only=True)
class SmokeOutcome:
    """A smoke test's result: passed, exit code, a one-line summary, and the report written."""
    passed: bool
    exit_code: int
    summary: str                       # one line: what passed, or what broke first
    report: dict[str, Any]             # what report.json holds
    paths: dict[str, Path]             # report, summary, junit
    runs: tuple[RunResult, ...] = ()
    ladder: LadderResult | None = field(default=None)
    root_cause: str = ""               # the log excerpt behind the first failure ("" when none)
    interrupted: str = ""              # the signal that stopped it ("SIGTERM"), "" when it ran to the end


class SmokeInterrupted(Interrupted):
    """SIGINT/SIGTERM/SIGHUP stopped the run: the server is stopped and `outcome` holds the partial report
    (written). A KeyboardInterrupt, so a caller such as bisect stops too."""

    def __init__(self, signum: int, outcome: SmokeOutcome) -> None:
        super().__init__(signum)
        self.outcome = outcome


def run_smoke(lock: Lock | None, *, out_dir: Path | None = None, ui: UI | None = None,
              options: SmokeOptions | None = None) -> SmokeOutcome:
    """Install a lock's wheels, serve the model and run the smoke cases (with the ladder on failure)."""
    ui = ui or UI(quiet=True)
    opts = options or SmokeOptions()
    if lock is None and not opts.serve_cmd:
        raise UsageError("smoke needs a lock (or a serve command to drive a server without one)",
                         hint="toolchain smoke --lock dist/NAME/stack.lock.toml --device b70")
    started = time.monotonic()
    out = (out_dir or _default_out(lock)).resolve()
    check_ours(out, "smoke --out", SMOKE_MARKERS, removing=False)  # new, empty, or a smoke report's folder
    where = f"{lock.path} [smoke]" if lock else "[smoke]"
    smoke = smoke_spec(lock.smoke, where) if lock else SmokeSpec()
    runtime, py, base_python = _where(opts, lock, smoke, out, ui)
    config = build_config(opts, smoke, py.python, where=where)
    require_a_server(lock, opts, smoke, runtime)
    claim(out, "smoke --out", SMOKE_MARKERS, removing=False)
    from toolchain.target.hostfacts import gather

    rep: dict[str, Any] = {
        "tool": "toolchain smoke", "tool_version": __version__, "host": to_table(gather(), kebab=True),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "lock": str(lock.path) if lock else None, "recipe": lock.recipe_name if lock else None, "out": str(out),
        **({"image": {"ref": opts.image, "digest": opts.image.rpartition("@")[2], "engine": opts.image_engine}}
           if opts.image else {}),
        "config": {**to_table(config), "env": redact_env(dict(config.env))},
    }
    runs: list[RunResult] = []
    made_venv = base_python is not None and bool(py.venv)
    try:
        with interruptible():
            try:
                ladder = _smoke(lock, opts, config, py, base_python, out, ui, rep, runs)
            except KeyboardInterrupt as exc:
                stop = Interrupted.of(exc)
                _end_venv(made_venv, runtime, py.venv, opts.keep_venv, rep)
                raise SmokeInterrupted(stop.signum, _interrupted(stop, rep, runs, out, started)) from None
            except ToolError as err:
                _end_venv(made_venv, runtime, py.venv, opts.keep_venv, rep)
                rep.update(verdict="fail", exit_code=err.return_code, error=str(err),
                           seconds=time.monotonic() - started)
                report.write_all(out, rep)
                raise
    finally:
        _end_venv(made_venv, runtime, py.venv, opts.keep_venv, rep)
    passed = not ladder.first_broken if ladder else runs[0].passed
    rep.update(verdict="pass" if passed else "fail", exit_code=0 if passed else 1,
               seconds=round(time.monotonic() - started, 3), runs=[r.to_dict() for r in runs],
               ladder=ladder.to_dict() if ladder else None)
    paths = report.write_all(out, rep)
    cause = next((r.root_cause for r in runs if not r.passed and r.root_cause), ())
    if passed:
        summary = f"every required case passed ({len(runs)} run(s))"
    else:
        summary = f"ladder breaks at {ladder.first_broken}: {ladder.how}" if ladder else runs[0].how()
    return SmokeOutcome(passed=passed, exit_code=0 if passed else 1, summary=summary, report=rep, paths=paths,
                        runs=tuple(runs), ladder=ladder,
                        root_cause=render(cause) if cause else "")


def _smoke(lock: Lock | None, opts: SmokeOptions, config: SmokeConfig, py: Interpreter,
           base_python: str | None, out: Path, ui: UI, rep: dict[str, Any], runs: list[RunResult]) -> LadderResult | None:
    """Runtime, device check, install, then the runs (appended to `runs` as they finish)."""
    runtime = py.runtime
    with contextlib.ExitStack() as stack:
        rep["stage"] = "prepare"
        staged = _stage(lock, opts, py, base_python, out, ui)
        if opening := runtime.said("opening the serving {where}"):
            ui.step(opening)
        stack.enter_context(runtime)
        rep["target"] = runtime.report()
        if named := runtime.said(f"target: {rep['target']['name']}"):
            ui.info(named)
        rep["device"] = to_table(_check_devices(opts, config, Interpreter(runtime, base_python) if base_python else py))
        ui.info(f"device: {rep['device']['message']}")
        py = _prepare(lock, opts, py, base_python, staged, out, ui, rep)
        if lock is not None and staged is not None and (lock.closure is not None or lock.base is not None):
            rep["native"] = _native_check(lock, py, out, ui, opts.cache_dir)
        rep["served"] = served(config.serve_argv, py, rep.get("install"))
        if rep["served"]["note"]:
            ui.warn(rep["served"]["note"])
        rep["stage"] = "serve"
        ladder = _serve_and_test(opts, config, py, out, ui, runs)
        rep.pop("stage")
        return ladder


def _native_check(lock: Lock, py: Interpreter, out: Path, ui: UI, cache_dir: Path | None = None) -> dict[str, Any]:
    """Before serving: every shared object of every installed wheel (the closure's too: they are fetched anyway)
    gets a verdict on each soname it needs, where the stack runs (toolchain.resolve.verdicts, at="run"):
    provided by the lock or, over a base image, a distribution its interpreter installed; on the target's loader
    path (each library the lock expects from the run host is looked up: present, or absent with the package that
    brings it); or missing. Smoke serves without oneAPI sourced, so setvars' library path does not count. Raises
    NativeABIError when one an extension module of a component loads is not there. The audits are kept in
    `cache_dir` (smoke's --cache-dir; None: the default cache)."""
    from toolchain.core.trust import cache_root
    from toolchain.resolve import native, verdicts
    from toolchain.resolve.closure import DEPS_DIR
    from toolchain.resolve.policy import policy_of_recipe_text

    assert lock.path is not None
    built = [(lock.wheel_path(c), c.wheel.sha256, f"{c.dist or c.name} {c.version}",
              "prebuilt" if c.prebuilt else "built") for c in lock.components]
    audits = native.audit_wheels(built, lock.closure.dists if lock.closure else (), cache_dir or cache_root(),
                                 lock.path.parent / DEPS_DIR, out / "install.log")
    report = verdicts.NativeReport()
    policy = policy_of_recipe_text(lock.recipe_text)
    if any(a.objects for a in audits):  # over a base image: what its interpreter has installed counts too
        report = verdicts.check(audits, native.target_providers(py, py.python, [], "",
                                                                installed=lock.base is not None), policy, at="run")
    log = out / "native.log"
    atomic_write_text(log, verdicts.full_log(report, f"the smoke target ({py.where()})"))
    expected = {so for a in lock.native for so in a.host_provides} | {n.soname for n in report.of("host")}
    absent = report.of("host-absent")
    present = sorted(expected - {n.soname for n in absent})
    summary: dict[str, Any] = {"wheels": len(audits), "shared-objects": sum(len(a.objects) for a in audits),
               "missing": [n.soname for n in report.errors],
               "host-present": present,
               "host-absent": [{"soname": n.soname, "brings-it": n.ships} for n in absent]}
    verdicts.raise_for(report, f"the smoke target ({py.where()})", policy, log)
    for line in verdicts.capped([n.line() for n in report.warnings], log):
        ui.warn(line)
    ui.info(f"native libraries: every soname what loads {summary['shared-objects']} shared object(s) needs is there; "
            f"host libraries present: {', '.join(present[:10]) or 'none expected'}"
            + (f" and {len(present) - 10} more" if len(present) > 10 else ""))
    return summary


def _interrupted(stop: Interrupted, rep: dict[str, Any], runs: list[RunResult], out: Path,
                 started: float) -> SmokeOutcome:
    """The partial report of an interrupted run: what ran, what was running, what did not."""
    ran = [c for r in runs for c in r.cases if c.category not in ("not-run", "interrupted")]
    running = next((f"{r.name}/{c.name}" for r in runs for c in r.cases if c.category == "interrupted"), "")
    stage = rep.pop("stage", "prepare")
    what = f"case {running}" if running else ("serving" if stage == "serve" else "preparing (before serving)")
    summary = (f"interrupted by {stop.signame} while {what}; {len(ran)} case(s) ran"
               + (": " + ", ".join(f"{c.name} {c.verdict}" for c in ran) if ran else ""))
    rep.update(verdict="interrupted", exit_code=stop.exit_code, interrupted={"signal": stop.signame,
               "stage": stage, "running": running or None, "cases_run": len(ran)},
               seconds=round(time.monotonic() - started, 3), runs=[r.to_dict() for r in runs])
    paths = report.write_all(out, rep)
    return SmokeOutcome(passed=False, exit_code=stop.exit_code, summary=summary, report=rep, paths=paths,
                        runs=tuple(runs), ladder=None, root_cause="", interrupted=stop.signame)


def _end_venv(made: bool, runtime: ServeRuntime, venv: str, keep: bool, rep: dict[str, Any]) -> None:
    """Remove the fresh venv smoke made (gigabytes for a real stack) unless asked to keep it (a container's goes
    with the container)."""
    if not made or "venv_state" in rep.get("install", {}):
        return
    state = runtime.leave(venv, keep)
    if state == "kept":
        rep.setdefault("install", {})["venv_state"] = f"kept: the venv is at {venv} (--keep-venv)"
    elif state == "removed":
        rep.setdefault("install", {})["venv_state"] = f"removed: the venv {venv} (pass --keep-venv to keep it)"


def require_a_server(lock: Lock | None, opts: SmokeOptions, smoke: SmokeSpec, runtime: ServeRuntime) -> None:
    """A lock whose wheels hold no vLLM, installed into a fresh venv and served with the default
    `{python} -m vllm ...`, cannot start: say so before anything is installed (the demo's lock is one)."""
    if lock is None or not lock.components or opts.serve_cmd or opts.no_install or opts.image or smoke.serve_cmd:
        return
    if runtime.provides("vllm"):
        return  # the image brings its own vLLM (the venv sees the image's packages)
    dists = {str(canonicalize_name(c.dist or wheel_name_version(c.wheel.file)[0])) for c in lock.components}
    if "vllm" in dists:
        return
    demo = _is_demo(lock)
    what = ("it is the offline demo's lock: its three projects are shaped like the stack, but none of them is an "
            "inference server, so the demo cannot be smoked" if demo else
            "the fresh venv would have nothing to run `python -m vllm` with")
    raise UsageError(f"{lock.path}: the lock has no vLLM wheel (its wheels: {', '.join(sorted(dists))}); {what}",
                     hint="smoke the lock of a real stack (toolchain build --recipe ark-latest), or serve an "
                          "existing vLLM: --no-install --python /path/to/venv/bin/python, or --serve-cmd CMD")


def _is_demo(lock: Lock) -> bool:
    try:
        return bool(tomlio.loads(lock.recipe_text).get("demo")) if lock.recipe_text.strip() else False
    except tomlio.TOMLDecodeError:
        return False


def served(argv: Sequence[str], py: Interpreter, inst: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the serve command runs, and whether that is the environment whose versions were checked."""
    program = argv[0] if argv else ""
    program = py.runtime.which(program, py)
    checked = py.python if inst and inst.get("versions") else ""
    in_checked = bool(checked) and (os.path.abspath(program) == os.path.abspath(checked) or bool(
        py.venv and os.path.abspath(program).startswith(os.path.abspath(py.venv) + os.sep)))
    note = ""
    if checked and not in_checked:
        note = (f"the serve command runs {program}, not the environment whose versions were checked "
                f"({checked}): the version check says nothing about what was served")
    return {"argv": list(argv), "program": program, "verified": checked or None, "same_as_verified": in_checked,
            "note": note}


def _default_out(lock: Lock | None) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return (lock.path.parent / "smoke" / stamp) if lock and lock.path else Path("smoke-reports") / stamp


def _where(opts: SmokeOptions, lock: Lock | None, smoke: SmokeSpec, out: Path,
           ui: UI) -> tuple[ServeRuntime, Interpreter, str | None]:
    """Where to serve from: the runtime (the lock's target, ready to serve), the interpreter that serves (a
    fresh venv's when the lock's wheels are installed) and the one to make that venv from (None: nothing to
    install)."""
    if lock is None:
        host = HostRuntime()
        return host, Interpreter(host, opts.python or sys.executable), None
    if opts.image:  # the image as it is: its container serves, its interpreter already holds the lock
        spec = TargetSpec(runtime=opts.image_engine, python=opts.python or lock.target.python, image=opts.image,
                          run_args=opts.run_args)
        served_from = make_runtime(spec, ui, serving=Serving(port_of(opts.port, smoke), None, ""))
        return served_from, Interpreter(served_from, spec.python), None
    install_wheels = bool(lock.components) and not opts.no_install
    spec = spec_from_lock(lock, opts.python)
    runtime = make_runtime(spec, ui, serving=Serving(port_of(opts.port, smoke),
                                                     lock.wheels_dir if install_wheels else None,
                                                     lock.target.image_digest))
    venv = runtime.venv_at(opts.venv) if opts.venv is not None else f"{runtime.scratch(out)}/venv"
    if not install_wheels:
        return runtime, Interpreter(runtime, spec.python), None
    return runtime, Interpreter(runtime, f"{venv}/bin/python", venv), spec.python


def spec_from_lock(lock: Lock, python: str = "") -> TargetSpec:
    """The lock's target with the recipe's run-args and engine-args (kept in the lock's recipe text)."""
    recipe = tomlio.loads(lock.recipe_text).get("target", {}) if lock.recipe_text.strip() else {}
    return target_spec(lock.target, recipe, python, str(lock.path))


def _check_devices(opts: SmokeOptions, config: SmokeConfig, target: Interpreter) -> device_check.DeviceCheck:
    mask = config.env.get("ZE_AFFINITY_MASK", "")
    if not config.device:
        return device_check.DeviceCheck(device="", cards_needed=config.tensor_parallel_size, affinity_mask=mask,
                                        cards=(), ok=True, message="no device requested", skipped=True)
    if opts.skip_device_check:
        return device_check.skipped(config.device, config.tensor_parallel_size, mask)
    return device_check.check_in(target, config.device, config.tensor_parallel_size, mask)


def _stage(lock: Lock | None, opts: SmokeOptions, py: Interpreter, base_python: str | None, out: Path,
           ui: UI) -> install.Staged | None:
    """Before any container: the built wheels checked against their hashes, the locked dependency files
    fetched beside the lock with theirs, and the hashed requirements file written (an exec-mode container
    gets the wheel directory by copy when it starts). None: nothing to install, or --allow-unlocked-deps."""
    if lock is None or not lock.components or base_python is None:
        return None
    ui.step(f"verifying {len(lock.components)} wheel(s) against {lock.path}")
    verify_wheels(lock)
    if lock.closure is None and opts.allow_unlocked_deps:
        ui.warn(f"{lock.path} pins no dependencies: they come from the index, unpinned (--allow-unlocked-deps)")
        return None
    if lock.closure is not None:
        ui.step(f"fetching the {len(lock.closure.dists)} locked dependency file(s) (sha256 checked)")
    return install.stage(lock, py, out / "install.log")


def _prepare(lock: Lock | None, opts: SmokeOptions, py: Interpreter, base_python: str | None,
             staged: install.Staged | None, out: Path, ui: UI, rep: dict[str, Any]) -> Interpreter:
    """Fresh venv, install exactly the lock (hashes required, no index), versions and environment checked
    against the lock; fills rep["install"] as it goes."""
    if lock is None or not lock.components:
        return py
    log = out / "install.log"
    info: dict[str, Any] = {"python": py.python, "log": str(log), "steps": [], "versions": []}
    rep["install"] = info
    if base_python is not None:
        info["unlocked"] = lock.closure is None and opts.allow_unlocked_deps
        ui.step(f"creating a fresh venv {py.venv} from {base_python}"
                + py.runtime.said(" in the {where}"))
        py = py.runtime.make_venv(base_python, py.venv, log)
        steps = install.install(lock, py, log, progress=lambda s: ui.step(
            f"installing {s.component}: {s.wheel.name} {' '.join(s.args)}".rstrip()),
            allow_unlocked=opts.allow_unlocked_deps, staged=staged)
        info["steps"] = to_data(steps)
    where = py.where()
    info["environment"] = install.environment(lock, py, log)
    checks = install.check_versions(lock, py, log)
    info["versions"] = [c.to_dict() for c in checks]
    install.require_versions(checks, where)
    install.require_environment(info["environment"], where, installed_here=base_python is not None)
    ui.info(f"installed versions match the lock ({len(checks)} package(s))")
    return py


def _serve_and_test(opts: SmokeOptions, config: SmokeConfig, py: Interpreter, out: Path,
                    ui: UI, runs: list[RunResult]) -> LadderResult | None:
    """The regression set (or the ladder); each finished or interrupted run is appended to `runs`."""
    signatures = load_signatures()

    def run_one(name: str, argv: list[str], env: dict[str, str]) -> RunResult:
        try:
            result = run_set(config, name=name, argv=argv, env=env, out_dir=out / name, py=py, ui=ui,
                             signatures=signatures)
        except RunInterrupted as exc:
            runs.append(exc.result)
            raise
        runs.append(result)
        return result

    if opts.ladder:
        return run_ladder(config.serve_argv, config.env, config.ladder, run_one)
    run_one("smoke", list(config.serve_argv), dict(config.env))
    return None
