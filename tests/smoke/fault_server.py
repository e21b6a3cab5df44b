#!/usr/bin/env python3
"""A small OpenAI-compatible server that misbehaves on purpose, for the `toolchain smoke` tests.

Standard library only (it also runs under a bare venv's python). Answers the regression set's prompts
correctly unless a mode says otherwise; `--mode` takes a comma-separated list:

  healthy               every answer right
  crash-first           the first POST kills the process (exit 139, like a segfault)
  segv-first            the first POST kills the process with a real SIGSEGV
  oom                   the first chat request logs an out-of-device-memory error; chats answer HTTP 500
  invalid-json          response_format answers are truncated JSON
  degenerate            the "primary colors" answer degenerates into blank lines and repeated words
  never-ready           /v1/models and /health answer 503 forever
  slow-first            the first chat request sleeps --slow-seconds before answering
  exit-early            exits with an import error before listening
  gdn-unless-disabled   chats fail with the ESIMD GDN AttributeError unless DISABLE_ESIMD_GDN_OUTPROJ=1
  break-on-fp8          with --kv-cache-dtype fp8 on the command line, every chat answer degenerates
  engine-error          chats fail like vLLM V1 when its engine core raises: the EngineCore process logs a
                        traceback ending in --error, the API server logs EngineDeadError ("See stack trace
                        (above)"), the answer is HTTP 500; the server stays up
  engine-dead           the same on the first chat, then the engine is gone: later requests get HTTP 500 and
                        the process exits with code 0 --die-after seconds later (as vLLM's API server does)
  flat-error            chats answer HTTP 500 with older vLLM's flat body {"object": "error", "message": ...}
  nan                   every chat answer is "!!!!!!" (what a model with NaN weights emits)
Unknown arguments (vLLM's --enforce-eager, --kv-cache-dtype, ...) are accepted and ignored.
`--env-out FILE` writes the environment, argv and sys.prefix it started with as JSON; `--echo-env NAME`
prints a variable to the log (to test that secrets are masked there). `--children N` starts N engine-like
child processes (in the server's process group; `--stubborn-children`: they ignore SIGINT and SIGTERM) and
`--pid-file FILE` records the server's and the children's pids. Each POST is logged when it arrives.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"chats": 0, "posts": 0}
LOCK = threading.Lock()


def log(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def sample(schema: dict) -> object:
    kind: str = schema.get("type", "")
    if kind == "object":
        return {k: ("red" if k == "color" else "square" if k == "shape" else sample(v))
                for k, v in schema.get("properties", {}).items()}
    return {"string": "Tom", "integer": 4, "number": 1.5, "boolean": True, "array": []}.get(kind, "x")


def answer(body: dict) -> str:
    parts, has_image = [], False
    for m in body.get("messages", []):
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        else:
            for p in content or []:
                if p.get("type") == "text":
                    parts.append(p["text"])
                has_image |= p.get("type") == "image_url"
    text = "\n".join(parts)
    rf = body.get("response_format") or {}
    if rf.get("type") == "json_schema":
        return json.dumps(sample(rf["json_schema"]["schema"]))
    code = re.search(r"secret code is (\d+)", text)
    if code:
        return f"The secret code is {code.group(1)}."
    if "2+3" in text:
        return "2 + 3 = 5"
    if "capital of France" in text:
        return "The capital of France is Paris."
    if has_image:
        return "Red."
    if "primary colors" in text:
        return "Red, blue and yellow."
    return "Hello! How can I help you today?"


DEGENERATE = "Red, blue and\n\n\n\n\n\n\n" + "yellow " * 20
ENGINE = "(EngineCore_DP0 pid=4242) "
API = f"(APIServer pid={os.getpid()}) "
CHILD = ("import signal, sys, time\n"
         "if sys.argv[1] == '1':\n"
         "    signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
         "print('engine worker ready', flush=True)\n"
         "time.sleep(3600)\n")


def vllm_log(prefix: str, where: str, lines: list[str]) -> None:
    """Lines as vLLM logs them: process prefix and logging header on every line."""
    for line in lines:
        log(f"{prefix}ERROR 12-02 10:00:05 [{where}] {line}")


def engine_failure(error: str) -> None:
    vllm_log(ENGINE, "core.py:712", [
        "EngineCore encountered a fatal error.",
        "Traceback (most recent call last):",
        '  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 703, in run_engine_core',
        "    engine_core.run_busy_loop()",
        '  File "/venv/lib/python3.12/site-packages/vllm/model_executor/layers/quantization/gguf.py", line 40, in apply',
        "    return fused_mul_mat_gguf(x, layer.qweight, layer.qweight_type)",
        error])
    vllm_log(API, "async_llm.py:480", [
        "AsyncLLM output_handler failed.",
        "Traceback (most recent call last):",
        '  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/async_llm.py", line 439, in output_handler',
        "    outputs = await engine_core.get_output_async()",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for "
        "the root cause."])


ENGINE_DEAD_BODY = {"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                              "type": "InternalServerError", "param": None, "code": 500}}


def make_handler(args: argparse.Namespace, modes: set[str]) -> type[BaseHTTPRequestHandler]:
    fp8 = "break-on-fp8" in modes and "--kv-cache-dtype" in args.rest and args.rest[args.rest.index("--kv-cache-dtype") + 1:][:1] == ["fp8"]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *a: object) -> None:  # like uvicorn's access log, on stderr
            log(f"INFO: {self.address_string()} - {fmt % a}")

        def _send(self, status: int, payload: object, raw: str | None = None) -> None:
            data = (raw if raw is not None else json.dumps(payload)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if "never-ready" in modes:
                return self._send(503, {"error": "loading"})
            if self.path == "/health":
                return self._send(200, {})
            if self.path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": args.served_model_name, "object": "model"}]})
            self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            with LOCK:
                STATE["posts"] += 1
                STATE["chats"] += self.path == "/v1/chat/completions"
                first = STATE["chats"] == 1
                log(f"INFO: request {STATE['posts']} received: POST {self.path}")
            if "segv-first" in modes:
                log("Fatal Python error: Segmentation fault")
                os.kill(os.getpid(), signal.SIGSEGV)
                time.sleep(60)  # delivery is asynchronous: never answer this request
            if "crash-first" in modes:
                log("Fatal Python error: Segmentation fault")
                os._exit(139)
            if self.path != "/v1/chat/completions":
                return self._send(404, {"error": "not found"})
            if body.get("model") != args.served_model_name:
                return self._send(404, {"error": {"message": f"model {body.get('model')!r} does not exist"}})
            if "engine-dead" in modes:
                if first:
                    engine_failure(args.error)
                    threading.Thread(target=die_later, args=(args.die_after,), daemon=True).start()
                return self._send(500, ENGINE_DEAD_BODY)
            if "engine-error" in modes:
                engine_failure(args.error)
                return self._send(500, ENGINE_DEAD_BODY)
            if "flat-error" in modes:
                return self._send(500, {"object": "error", "message": "Sampling failed: probability tensor "
                                        "contains either inf, nan or element < 0", "type": "InternalServerError",
                                        "param": None, "code": 500})
            if "oom" in modes:
                if first:
                    log("RuntimeError: UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY")
                return self._send(500, {"error": {"message": "XPU out of memory. Tried to allocate 20.00 GiB",
                                                  "type": "InternalServerError", "code": 500}})
            if "gdn-unless-disabled" in modes and os.environ.get("DISABLE_ESIMD_GDN_OUTPROJ") != "1":
                log("Traceback (most recent call last):")
                log("AttributeError: 'RowParallelLinear' object has no attribute 'weight'")
                return self._send(500, {"error": {"message": "EngineCore encountered an issue", "code": 500}})
            if "slow-first" in modes and first:
                time.sleep(args.slow_seconds)
            content = "!!!!!!" if "nan" in modes else answer(body)
            if "invalid-json" in modes and body.get("response_format"):
                content = content[: len(content) // 2]
            if ("degenerate" in modes and "primary colors" in json.dumps(body)) or fp8:
                content = DEGENERATE
            self._send(200, {"id": "x", "object": "chat.completion", "model": args.served_model_name,
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                          "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 10, "completion_tokens": len(content.split()),
                                       "total_tokens": 10 + len(content.split())}})

    return Handler


def die_later(seconds: float) -> None:
    time.sleep(seconds)
    log(f"{API}INFO 12-02 10:00:06 [launcher.py:99] Shutting down FastAPI HTTP server.")
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", default="healthy")
    parser.add_argument("--served-model-name", default="fault-model")
    parser.add_argument("--slow-seconds", type=float, default=30.0)
    parser.add_argument("--startup-delay", type=float, default=0.2)
    parser.add_argument("--env-out")
    parser.add_argument("--echo-env", action="append", default=[], help="print NAME=value at start-up")
    parser.add_argument("--error", default="RuntimeError: fused_moe kernel failed: invalid argument (0xdead)")
    parser.add_argument("--die-after", type=float, default=0.5)
    parser.add_argument("--children", type=int, default=0)
    parser.add_argument("--stubborn-children", action="store_true")
    parser.add_argument("--pid-file")
    args, rest = parser.parse_known_args()
    args.rest = rest
    modes = set(args.mode.split(","))
    if args.env_out:
        with open(args.env_out, "w") as f:
            json.dump({"env": dict(os.environ), "argv": sys.argv, "prefix": sys.prefix}, f)
    log(f"fault server: modes {sorted(modes)}, args {rest}")
    for name in args.echo_env:
        log(f"config {name}={os.environ.get(name)} (value {os.environ.get(name)})")
    if "exit-early" in modes:
        log("ImportError: libsycl.so.8: cannot open shared object file: No such file or directory")
        sys.exit(1)
    children = [subprocess.Popen([sys.executable, "-c", CHILD, "1" if args.stubborn_children else "0"])
                for _ in range(args.children)]
    if args.pid_file:
        with open(args.pid_file + ".tmp", "w") as f:
            json.dump({"pid": os.getpid(), "pgid": os.getpgid(0), "children": [c.pid for c in children]}, f)
        os.replace(args.pid_file + ".tmp", args.pid_file)
    time.sleep(args.startup_delay)  # "loading the model"
    server = ThreadingHTTPServer((args.host, args.port), make_handler(args, modes))
    server.daemon_threads = True
    log(f"INFO: Uvicorn running on http://{args.host}:{args.port}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log("INFO: Shutting down")


if __name__ == "__main__":
    main()
