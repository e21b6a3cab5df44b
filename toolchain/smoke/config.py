"""The lock's `[smoke]` table plus the command line → one frozen `SmokeConfig`.

`[smoke]` keys (the recipe's table, kept verbatim in the lock):
  model, served-model-name, device ("b60"/"b70"), tensor-parallel-size, port, max-model-len, serve-cmd (argv
  with placeholders; default `{python} -m vllm.entrypoints.cli.main serve {model}`), serve-args, env,
  cases (names to run), custom-cases (tables with a name: change a built-in case or add one), repeat (how
  many identical requests the repeat case sends), ladder (steps, see ladder.py), ready-timeout,
  request-timeout.
Placeholders in serve-cmd, serve-args and --serve-cmd: {python} {model} {host} {port} {tp}.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from toolchain.core.record import field, record
from toolchain.core.serial import Data, meta
from toolchain.errors import RecipeError, UsageError
from toolchain.recipe.model import SmokeSpec
from toolchain.smoke import cases as cases_mod
from toolchain.smoke import device_check
from toolchain.smoke.ladder import LadderStep, steps_from

DEFAULT_SERVE_COMMAND = ("{python}", "-m", "vllm.entrypoints.cli.main", "serve", "{model}")
DEFAULT_PORT = 8000
DEFAULT_READY_TIMEOUT = 1800.0
DEFAULT_REQUEST_TIMEOUT = 600.0


@record
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
    keep_venv: bool = False
    allow_unlocked_deps: bool = False  # a lock without a closure: its dependencies from the index, unpinned
    image: str = ""                    # serve from this image (NAME@sha256:..., made by `toolchain image`) as it is
    image_engine: str = "podman"
    run_args: tuple[str, ...] = ()     # the engine's run arguments for that image's container
    cache_dir: Path | None = None      # --cache-dir: where the native audits are kept (None: the default cache)


def _case_names(specs: Sequence[cases_mod.CaseSpec]) -> Data:
    return [c.name for c in specs]


@record
class SmokeConfig:
    """Everything one smoke run needs: how to start the server, where it listens, the cases and the ladder."""
    serve_argv: tuple[str, ...]
    env: Mapping[str, str]           # added to the (oneAPI-free) environment of the server
    host: str
    port: int
    model: str                       # the name requests use; "" = the first one /v1/models lists
    cases: tuple[cases_mod.CaseSpec, ...] = field(metadata=meta(dump=_case_names))  # a report names them
    device: str                      # "" when none was requested
    tensor_parallel_size: int
    ready_timeout: float
    request_timeout: float
    ladder: tuple[LadderStep, ...] = field(metadata=meta(skip=True))  # a report shows the ladder's run

    @property
    def base_url(self) -> str:
        """The server's base URL (http://HOST:PORT)."""
        return f"http://{self.host}:{self.port}"


def expand(argv: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """Replace the known {placeholders} per element (other braces, e.g. JSON, are left alone)."""
    out = []
    for arg in argv:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return out


def port_of(option: int, smoke: SmokeSpec) -> int:
    """The port the server listens on: --port, else [smoke] port, else DEFAULT_PORT."""
    return option or smoke.port or DEFAULT_PORT


def build_config(opts: SmokeOptions, smoke: SmokeSpec, python: str, where: str = "[smoke]") -> SmokeConfig:
    """`opts`' non-empty fields win over the lock's [smoke] table (typed by recipe.validate.smoke_spec)."""
    serve_model = opts.model or smoke.model
    request_model = opts.model or smoke.served_model_name or serve_model
    device = opts.device or smoke.device
    tp = opts.tensor_parallel_size or smoke.tensor_parallel_size or 1
    port = port_of(opts.port, smoke)
    env = dict(smoke.env)
    if device:
        env.update(device_check.device_env(device_check.profile(device), tp, env))
    values = {"python": python, "model": serve_model, "host": opts.host, "port": str(port), "tp": str(tp)}
    if opts.serve_cmd:
        argv = expand(shlex.split(opts.serve_cmd), values)
        if not argv:
            raise UsageError("--serve-cmd is empty")
    else:
        argv = expand(_profile_argv(smoke, serve_model, opts.host, port, tp, bool(opts.model)), values)
    custom = _custom_cases(smoke, where)
    names = list(opts.cases) or list(smoke.cases) or \
        list(cases_mod.DEFAULT_CASES) + [n for n in custom if n not in cases_mod.DEFAULT_CASES]
    return SmokeConfig(
        serve_argv=tuple(argv), env=env, host=opts.host, port=port, model=request_model,
        cases=cases_mod.resolve(names, custom, f"{where}.custom-cases"),
        device=device, tensor_parallel_size=tp,
        ready_timeout=opts.ready_timeout or smoke.ready_timeout or DEFAULT_READY_TIMEOUT,
        request_timeout=opts.request_timeout or smoke.request_timeout or DEFAULT_REQUEST_TIMEOUT,
        ladder=steps_from(smoke.ladder, f"{where}.ladder"),
    )


def _profile_argv(smoke: SmokeSpec, model: str, host: str, port: int, tp: int, model_from_cli: bool) -> list[str]:
    """The recipe's serve command: serve-cmd (or `vllm serve {model}`) + host/port, TP, served name, serve-args."""
    template = list(smoke.serve_cmd or DEFAULT_SERVE_COMMAND)
    if any("{model}" in a for a in template) and not model:
        raise UsageError("no model to serve", hint="set model in the recipe's [smoke] table or pass --model")
    args = list(smoke.serve_args)
    extra = []
    if not any("{port}" in a for a in template + args):
        extra += ["--host", host, "--port", str(port)]
    if (tp > 1 or smoke.tensor_parallel_size) and "--tensor-parallel-size" not in args:
        extra += ["--tensor-parallel-size", str(tp)]
    if smoke.served_model_name and "--served-model-name" not in args and not model_from_cli:
        extra += ["--served-model-name", smoke.served_model_name]
    if smoke.max_model_len and "--max-model-len" not in args:
        extra += ["--max-model-len", str(smoke.max_model_len)]
    return template + extra + args


def _custom_cases(smoke: SmokeSpec, where: str) -> dict[str, dict[str, Any]]:
    """custom-cases as {name: params}; `repeat` sets the repeat case's count."""
    custom: dict[str, dict[str, Any]] = {}
    for i, table in enumerate(smoke.custom_cases):
        if not table.get("name"):
            raise RecipeError(f"{where}.custom-cases #{i + 1}: each custom case is a table with a name")
        custom[str(table["name"])] = {k: v for k, v in table.items() if k != "name"}
    if smoke.repeat:
        custom.setdefault("repeat", {}).setdefault("repeat", smoke.repeat)
    return custom
