"""`toolchain smoke`: verify and install a lock's wheels, serve with the recipe's [smoke] profile (no oneAPI
sourced), run the named regression set (or the ladder), triage failures and write the reports.

Exit codes: 0 every required case passed; 1 a case failed, the server never became ready, or a wheel hash or
an installed version differs from the lock; 2 bad input (including cards that do not match --device, and a
lock with no vLLM to serve, such as the offline demo's). SIGINT, SIGTERM or SIGHUP stop the server's whole
process group and write a partial report (exit 128 + the signal's number).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import NoReturn

from rich.markup import escape
from rich.table import Table

from toolchain.commands import options
from toolchain.console import UI, CommandResult
from toolchain.core.devices import PROFILES
from toolchain.core.record import replace
from toolchain.errors import UsageError
from toolchain.lock import Lock, read_lock
from toolchain.recipe.model import SuiteSpec
from toolchain.smoke.cases import DEFAULT_CASES, PRESETS
from toolchain.smoke.config import SmokeOptions
from toolchain.smoke.session import SmokeInterrupted, SmokeOutcome, run_smoke


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("smoke", help="install a lock's wheels, serve, run the regression set",
                       description=__doc__)
    p.add_argument("--lock", type=Path, help="stack.lock.toml (or its directory) written by `toolchain build`")
    p.add_argument("--image", metavar="REF",
                   help="instead of --lock: serve from this image (made by `toolchain image`) as it is, nothing "
                        "installed; its lock is read from it, its versions are checked, the report records its digest")
    p.add_argument("--image-engine", choices=("podman", "docker"), default="podman",
                   help="the engine that runs --image (default podman)")
    p.add_argument("--run-arg", action="append", default=[], metavar="ARG", dest="run_args",
                   help="with --image: an argument for the engine's `run` (a mount, a device); repeatable")
    options.add(p, "out", help={"out": "report directory (default: <lock dir>/smoke/<time>; with --image, "
                                       "./smoke-reports/<time>)"})
    options.add(p, "cache-dir", help={"cache-dir": "the cache whose source mirror a [smoke.suite] lock's tests "
                                                   "come from, and where the wheels' native audits (and, with "
                                                   "--image, the lock read from it, for the run) are kept (default: "
                                                   "$TOOLCHAIN_CACHE_DIR or ~/.cache/xpu-toolchain)"})
    add_options(p)
    p.set_defaults(handler=handle)


def add_options(p: argparse.ArgumentParser) -> None:
    """The options that choose how to smoke a lock (all but which lock and where the reports go): the
    command's, and what `toolchain bisect --test smoke --smoke-args` accepts."""
    p.add_argument("--device", choices=sorted(PROFILES), help="card profile (default: the lock's [smoke])")
    p.add_argument("--skip-device-check", action="store_true", help="do not look for the cards (CPU test runs)")
    p.add_argument("--ladder", action="store_true",
                   help="eager, then + FP8 KV, + XPU graph, + GDN optimization; report the first step that breaks")
    p.add_argument("--serve-cmd", metavar="CMD", help="serve with this command line instead of the profile's; "
                   "placeholders {python} {model} {host} {port} {tp}")
    p.add_argument("--model", help="model to serve and to name in requests (default: the lock's [smoke])")
    p.add_argument("--host", default="127.0.0.1", help="address the server listens on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: [smoke] port or 8000)")
    p.add_argument("--tensor-parallel-size", type=int, metavar="N", help="cards to serve on (default: [smoke])")
    p.add_argument("--cases", metavar="A,B,...", help=f"cases to run, comma-separated (default: {','.join(DEFAULT_CASES)}; "
                   f"built in: {', '.join(PRESETS)}; recipes add more)")
    p.add_argument("--ready-timeout", type=float, metavar="SECONDS",
                   help="seconds to wait for readiness (default 1800)")
    p.add_argument("--request-timeout", type=float, metavar="SECONDS", help="seconds per request (default 600)")
    p.add_argument("--no-install", action="store_true", help="serve from an existing environment (see --python)")
    p.add_argument("--python", help="interpreter the fresh venv is made from (default: the lock's); "
                   "with --no-install, the environment to serve from")
    p.add_argument("--venv", type=Path, metavar="DIR",
                   help="where the fresh venv goes (default: <out>/venv; removed at the end)")
    p.add_argument("--keep-venv", action="store_true", help="keep the fresh venv after the run (it can be gigabytes)")
    p.add_argument("--allow-unlocked-deps", action="store_true",
                   help="a lock without a resolved closure (`build --no-resolve`, older locks): install its wheels' "
                        "dependencies from the index, unpinned; the report marks the run unlocked (default: an "
                        "error; `toolchain lock --lock LOCK` pins them)")


def options_from(args: argparse.Namespace) -> SmokeOptions:
    return SmokeOptions(
        device=args.device or "", skip_device_check=args.skip_device_check, ladder=args.ladder,
        serve_cmd=args.serve_cmd or "", model=args.model or "", host=args.host, port=args.port or 0,
        tensor_parallel_size=args.tensor_parallel_size or 0,
        cases=tuple(n.strip() for n in (args.cases or "").split(",") if n.strip()),
        ready_timeout=args.ready_timeout or 0.0, request_timeout=args.request_timeout or 0.0,
        no_install=args.no_install, python=args.python or "", venv=args.venv.resolve() if args.venv else None,
        keep_venv=args.keep_venv, allow_unlocked_deps=args.allow_unlocked_deps)


class _OptionsParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"--smoke-args: {message}", hint="check --smoke-args (see `toolchain smoke --help`)")


def parse_options(argv: Sequence[str]) -> SmokeOptions:
    """Smoke options given as words (`toolchain bisect --smoke-args "--cases math,qa"`), read by the same
    definitions as `toolchain smoke`'s own options."""
    p = _OptionsParser(prog="toolchain smoke", add_help=False)
    add_options(p)
    return options_from(p.parse_args(list(argv)))


def handle(args: argparse.Namespace, ui: UI) -> CommandResult:
    opts, out = replace(options_from(args), cache_dir=options.cache_dir(args)), args.out
    lock: Lock | None = None
    if args.image:
        if args.lock:
            raise UsageError("give --lock or --image, not both", hint="--image reads the lock the image carries")
        try:
            lock, opts = _image_lock(args, opts, ui)
            return _smoked(lock, out or Path("smoke-reports") / datetime.now().strftime("%Y%m%d-%H%M%S"), opts, ui)
        finally:  # (the lock read from the image was for this run)
            import shutil

            shutil.rmtree(_image_work(args), ignore_errors=True)
    else:
        lock = read_lock(args.lock) if args.lock else None
        suite = _suite_of(lock) if lock is not None and not opts.serve_cmd else None
        if lock is not None and suite is not None:  # upstream's own tests, no server
            return _suite_result(lock, suite, args, opts, ui)
    return _smoked(lock, out, opts, ui)


def _smoked(lock: Lock | None, out: Path | None, opts: SmokeOptions, ui: UI) -> CommandResult:
    try:
        outcome = run_smoke(lock, out_dir=out, ui=ui, options=opts)
    except SmokeInterrupted as stopped:  # the server is stopped; report the partial run
        outcome = stopped.outcome
    return _result(outcome)


def _image_work(args: argparse.Namespace) -> Path:
    """Where `--image`'s lock is read to, for the run."""
    return options.cache_dir(args) / "images" / "work" / f"smoke-{os.getpid()}"


def _image_lock(args: argparse.Namespace, opts: SmokeOptions, ui: UI) -> tuple[Lock, SmokeOptions]:
    """The lock an image carries (checked against its label) and the options that serve from that image, named
    by digest when the engine knows it."""
    from toolchain.core.fs import atomic_write_text
    from toolchain.image.provenance import from_engine
    from toolchain.target.container.engine import image_repo

    work = _image_work(args)
    with ui.status(f"reading the lock {args.image} carries"):
        found = from_engine(args.image, args.image_engine, work)
    if found is None:
        raise UsageError(f"{args.image_engine} holds no image {args.image}",
                         hint=f"pull or load it first (`toolchain image ... --load {args.image_engine}`)")
    atomic_write_text(work / "stack.lock.toml", found.lock_text)
    image = f"{image_repo(args.image)}@{found.digest}" if found.digest.startswith("sha256:") else args.image
    lock = read_lock(work / "stack.lock.toml")
    if not (opts.serve_cmd or lock.smoke.get("serve-cmd")):
        _require_vllm(args.image, image, args.image_engine, opts.python or lock.target.python_by_name(), ui)
    return lock, replace(opts, image=image, image_engine=args.image_engine, run_args=tuple(args.run_args))


def _require_vllm(ref: str, image: str, engine: str, python: str, ui: UI) -> None:
    """An image served with the default `python -m vllm ...` must hold vLLM: asked of its interpreter in a
    one-off container (no network, nothing installed) before any server starts; UsageError (exit 2) when not."""
    from toolchain.core.proc.runner import run
    from toolchain.image.base import engine_env

    ask = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('vllm') else 3)"
    with ui.status(f"looking for vLLM in {ref}"):
        done = run([engine, "run", "--rm", "--network=none", "--entrypoint", python, image, "-c", ask],
                   env=engine_env(), capture=True, check=False, timeout=600)
    if done.returncode == 3:
        raise UsageError(f"{ref} cannot be smoked: its {python} has no vLLM to serve (no `vllm` module in the image)",
                         hint="smoke the image of a stack that holds vLLM, or serve another server: --serve-cmd CMD")


def _result(outcome: SmokeOutcome) -> CommandResult:
    tables = []
    for run in outcome.runs:
        table = Table(title=f"{run.name}: {'PASS' if run.passed else 'FAIL'}"
                            + (f" (ready {run.ready.seconds:.1f}s)" if run.ready.ok else f" ({run.ready.reason})"))
        for col in ("case", "verdict", "time", "note"):
            table.add_column(col, overflow="fold" if col == "note" else "ellipsis")
        for c in run.cases:
            table.add_row(c.name, c.verdict if c.required else f"{c.verdict} (optional)", f"{c.seconds:.1f}s",
                          escape(c.message[:160]))
        tables.append(table)
    paths = outcome.paths
    verdict = "[green]PASS[/]: " if outcome.passed else \
        ("[yellow]INTERRUPTED[/]: " if outcome.interrupted else "[red]FAIL[/]: ")
    cause = f"\nroot cause (from the log):\n{escape(outcome.root_cause)}" if outcome.root_cause else ""
    summary = verdict + escape(outcome.summary) + cause + \
        f"\n{'partial reports' if outcome.interrupted else 'reports'}: {paths['summary']}  {paths['report']}  " \
        f"{paths['junit']}"
    rep, ladder = outcome.report, outcome.ladder
    data = {"ok": outcome.passed, "verdict": rep["verdict"], "exit_code": outcome.exit_code, "out": rep["out"],
            "reports": {k: str(v) for k, v in paths.items()}, "interrupted": outcome.interrupted or None,
            "root_cause": outcome.root_cause or None,
            "runs": [{"name": r.name, "passed": r.passed, "ready": r.ready.to_dict(), "crashed": r.crashed,
                      "oom": r.oom, "cases": {c.name: c.verdict for c in r.cases},
                      "findings": [f.id for f in r.findings]} for r in outcome.runs],
            "ladder": ({"first_broken": ladder.first_broken or None, "how": ladder.how} if ladder else None)}
    return CommandResult(data=data, exit_code=outcome.exit_code, summary=summary, tables=tuple(tables))


def _suite_of(lock: Lock) -> SuiteSpec | None:
    from toolchain.recipe.validate import smoke_spec

    return smoke_spec(lock.smoke, f"{lock.path} [smoke]").suite


def _suite_result(lock: Lock, suite: SuiteSpec, args: argparse.Namespace, opts: SmokeOptions,
                  ui: UI) -> CommandResult:
    from toolchain.smoke.suite import run_suite

    out = args.out or (lock.path.parent if lock.path else Path(".")) / "smoke" / datetime.now().strftime("%Y%m%d-%H%M%S")
    got = run_suite(lock, suite, out=out, cache_dir=options.cache_dir(args), python=opts.python,
                    keep_venv=opts.keep_venv, ui=ui)
    verdict = "[green]PASS[/]: " if got.passed else "[red]FAIL[/]: "
    skips = "".join(f"\n  skipped {n}: {escape(reason)}" for reason, n in got.skipped.items())
    return CommandResult({"ok": got.passed, "verdict": "pass" if got.passed else "fail", "counts": got.counts,
                          "skipped": got.skipped, "flaky": list(got.flaky), "reports": {"report": str(got.report), "junit": str(got.junit)}},
                         0 if got.passed else 1,
                         verdict + escape(got.summary) + skips + f"\nreports: {got.report}  {got.junit}")
