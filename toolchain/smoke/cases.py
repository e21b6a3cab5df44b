"""The named regression set: built-in cases, recipe overrides, and how each case is sent and judged.

A case is a kind ("models", "chat", "restart") with parameters. The built-in cases are presets; a recipe
changes one with `[smoke.case.NAME]` (its keys replace the preset's) or adds a new one (kind "chat" unless
it says otherwise). Every request and response is kept raw, with its timing.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import requests

from toolchain.core.names import did_you_mean
from toolchain.core.record import field, record
from toolchain.core.regex import Regex
from toolchain.core.serial import Data, meta, rounded, to_data, to_table
from toolchain.errors import UsageError
from toolchain.smoke.rootcause import Excerpt, headline, render

PASS, FAIL, ERROR, SKIP = "pass", "fail", "error", "skip"
KINDS = ("models", "chat", "restart")
PARAMS = frozenset({"kind", "required", "description", "prompt", "system", "image", "schema", "expect",
                    "expect-number", "max-tokens", "temperature", "repeat", "long-context-tokens", "needle",
                    "max-seconds"})

ANIMAL_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "legs"],
                 "properties": {"name": {"type": "string"}, "legs": {"type": "integer"}}}
IMAGE_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["color", "shape"],
                "properties": {"color": {"type": "string"}, "shape": {"type": "string"}}}
MATH = {"prompt": "What is 2+3? Answer with the number only.", "expect-number": "5", "max-tokens": 32}

PRESETS: dict[str, dict[str, Any]] = {
    "models": {"kind": "models", "description": "the model is listed by /v1/models"},
    "first": {"kind": "chat", "description": "first request after start (latency)",
              "prompt": "Say hello in one short sentence.", "max-tokens": 32},
    "math": {"kind": "chat", "description": "short math with an exact answer", **MATH},
    "qa": {"kind": "chat", "description": "plain question and answer",
           "prompt": "What is the capital of France? Answer in one word.", "expect": r"(?i)\bparis\b",
           "max-tokens": 32},
    "json": {"kind": "chat", "description": "text to JSON with response_format json_schema",
             "prompt": "Describe a cat as JSON with the fields name and legs.", "schema": ANIMAL_SCHEMA,
             "max-tokens": 96},
    "image": {"kind": "chat", "description": "single-image description",
              "prompt": "What color is the shape in this image? Answer in one word.", "image": "builtin:red-square",
              "expect": r"(?i)\bred\b", "max-tokens": 32},
    "image-json": {"kind": "chat", "description": "image to JSON with response_format json_schema",
                   "prompt": "Describe the shape in this image as JSON with the fields color and shape.",
                   "image": "builtin:red-square", "schema": IMAGE_SCHEMA, "expect": r"(?i)red", "max-tokens": 96},
    "repeat": {"kind": "chat", "description": "identical requests at temperature 0: consistent, not degenerate",
               "prompt": "Name three primary colors.", "repeat": 3, "max-tokens": 64},
    "long-context": {"kind": "chat", "description": "a number hidden in a long prompt",
                     "long-context-tokens": 1200, "needle": "4729", "max-tokens": 32},
    "restart": {"kind": "restart", "description": "stop, start again, then a request", **MATH},
}
DEFAULT_CASES = ("models", "first", "math", "qa", "image", "image-json", "repeat")


@record
class CaseSpec:
    """One smoke case to run: its name, kind, whether it must pass, and its parameters."""
    name: str
    kind: str
    required: bool
    params: Mapping[str, Any]

    @property
    def description(self) -> str:
        """The case's description parameter, "" when it has none."""
        return str(self.params.get("description", ""))


def resolve(names: Sequence[str], overrides: Mapping[str, Mapping[str, Any]] | None = None,
            where: str = "[smoke.case]") -> tuple[CaseSpec, ...]:
    """Case specs for `names`, each preset updated with the recipe's `[smoke.case.NAME]` table."""
    overrides = overrides or {}
    known = sorted(set(PRESETS) | set(overrides))
    problems = []
    for name, table in overrides.items():
        unknown = sorted(set(table) - PARAMS)
        problems += [f"{where}.{name}: unknown key {k!r}{did_you_mean(k, PARAMS)}" for k in unknown]
        kind = table.get("kind", PRESETS.get(name, {}).get("kind", "chat"))
        if kind not in KINDS:
            problems.append(f"{where}.{name}: kind {kind!r} is not one of {', '.join(KINDS)}")
    specs = []
    for name in names:
        if name not in known:
            problems.append(f"unknown case {name!r}{did_you_mean(name, known)} (known: {', '.join(known)})")
            continue
        params = {**PRESETS.get(name, {"kind": "chat"}), **overrides.get(name, {})}
        if params.get("kind", "chat") == "chat" and not (params.get("prompt") or params.get("long-context-tokens")):
            problems.append(f"{where}.{name}: a chat case needs a prompt")
        specs.append(CaseSpec(name, params.get("kind", "chat"), bool(params.get("required", True)), params))
    if problems:
        raise UsageError("cannot use the requested cases:\n" + "\n".join(f"  - {p}" for p in problems),
                         hint="see the case names in `toolchain smoke --help`")
    return tuple(specs)


# --------------------------------------------------------------------------------------------- HTTP

@record(kw_only=True)
class Exchange:
    """One HTTP request a case made to the server and the answer it got."""
    method: str
    url: str
    request: Any
    status: int | None
    response: str
    seconds: float = field(metadata=meta(dump=rounded(4)))
    error: str = ""          # transport failure ("timeout: ...", "connection: ...")

    def json(self) -> Any:
        """The response body parsed as JSON."""
        return json.loads(self.response)


class Client:
    """A small HTTP client of the OpenAI-compatible server under test; each request comes back as an Exchange."""
    def __init__(self, base_url: str, model: str, timeout: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.session = requests.Session()

    def get(self, path: str) -> Exchange:
        """GET `path` on the server."""
        return self._send("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> Exchange:
        """POST the JSON `body` to `path` on the server."""
        return self._send("POST", path, body)

    def _send(self, method: str, path: str, body: dict[str, Any] | None) -> Exchange:
        url = self.base_url + path
        started = time.monotonic()
        try:
            r = self.session.request(method, url, json=body, timeout=self.timeout)
            return Exchange(method=method, url=url, request=body, status=r.status_code, response=r.text,
                            seconds=time.monotonic() - started)
        except requests.Timeout:
            error = f"timeout: no answer within {self.timeout:g}s"
        except requests.RequestException as exc:
            error = f"connection: {type(exc).__name__}: {exc}"
        return Exchange(method=method, url=url, request=body, status=None, response="",
                        seconds=time.monotonic() - started, error=error)


# --------------------------------------------------------------------------------------------- results

def root_cause_data(excerpts: Sequence[Excerpt]) -> Data:
    """How report.json carries a root cause: one-line headline, the excerpt as text, and its parts."""
    if not excerpts:
        return None
    return {"headline": headline(excerpts), "text": render(excerpts), "excerpts": to_data(excerpts)}


@record(kw_only=True)
class CaseResult:
    """What one smoke case gave: its verdict, why, timings, metrics and the exchanges made."""
    name: str
    kind: str
    required: bool
    verdict: str
    message: str
    seconds: float = field(metadata=meta(dump=rounded(3)))
    exchanges: tuple[Exchange, ...] = ()
    category: str = ""   # why it failed: timeout, connection, http, protocol, output, restart, not-run
    metrics: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    # the root cause in the server log (set by the runner)
    excerpts: tuple[Excerpt, ...] = field(default=(), metadata=meta(key="root_cause", dump=root_cause_data))

    @property
    def passed(self) -> bool:
        """Whether the case's verdict is a pass."""
        return self.verdict == PASS

    def to_dict(self) -> dict[str, Data]:
        """The report's table (its keys snake_case, as report.json's have always been)."""
        return to_table(self)


def not_run(spec: CaseSpec, reason: str, verdict: str = SKIP) -> CaseResult:
    """The result of a case that did not run (skipped, or the server was not ready), with why."""
    return CaseResult(name=spec.name, kind=spec.kind, required=spec.required, verdict=verdict, message=reason,
                      seconds=0.0, category="not-run",
                      description=spec.description)


@dataclass
class CaseContext:
    """What a case may use: the client of the server, and a way to restart the server."""
    client: Client
    restart: Callable[[], Any] | None = None   # -> server.Readiness


class _Failed(Exception):
    def __init__(self, category: str, message: str, verdict: str = FAIL) -> None:
        super().__init__(message)
        self.category, self.verdict = category, verdict


def run_case(spec: CaseSpec, ctx: CaseContext) -> CaseResult:
    """Run one smoke case against the server and judge it; an exception becomes a failed result."""
    exchanges: list[Exchange] = []
    metrics: dict[str, Any] = {}
    started = time.monotonic()
    try:
        if spec.kind == "models":
            _models(ctx, exchanges, metrics)
            message = f"serves {ctx.client.model}"
        elif spec.kind == "restart":
            if ctx.restart is None:
                raise _Failed("restart", "this run cannot restart its server", ERROR)
            ready = ctx.restart()
            metrics["restart_seconds"] = round(ready.seconds, 3)
            if not ready.ok:
                raise _Failed("restart", f"after restart: {ready.reason}", ERROR)
            message = _chat(spec, ctx, exchanges, metrics)
        else:
            message = _chat(spec, ctx, exchanges, metrics)
        verdict, category = PASS, ""
    except _Failed as failed:
        verdict, category, message = failed.verdict, failed.category, str(failed)
    return CaseResult(name=spec.name, kind=spec.kind, required=spec.required, verdict=verdict, message=message,
                      seconds=time.monotonic() - started,
                      exchanges=tuple(exchanges), category=category, metrics=metrics, description=spec.description)


def _models(ctx: CaseContext, exchanges: list[Exchange], metrics: dict[str, object]) -> list[str]:
    ex = ctx.client.get("/v1/models")
    exchanges.append(ex)
    data = _response_json(ex)
    try:
        ids = [m["id"] for m in data["data"]]
    except (KeyError, TypeError):
        raise _Failed("protocol", f"/v1/models answer has no data[].id: {ex.response[:200]!r}") from None
    metrics["models"] = ids
    if not ids:
        raise _Failed("output", "/v1/models lists no model")
    if ctx.client.model and ctx.client.model not in ids:
        raise _Failed("output", f"model {ctx.client.model!r} is not served; /v1/models lists {ids}")
    ctx.client.model = ctx.client.model or ids[0]
    return ids


def _chat(spec: CaseSpec, ctx: CaseContext, exchanges: list[Exchange], metrics: dict[str, object]) -> str:
    p = spec.params
    if not ctx.client.model:
        _models(ctx, exchanges, {})
    prompt = chat_prompt(p)
    body = chat_body(spec.name, p, ctx.client.model)
    outputs = []
    for _ in range(int(p.get("repeat", 1))):
        ex = ctx.client.post("/v1/chat/completions", body)
        exchanges.append(ex)
        content, usage = _content(ex)
        if "latency_seconds" not in metrics:
            metrics["latency_seconds"] = round(ex.seconds, 3)
            if usage.get("completion_tokens"):
                metrics["completion_tokens"] = usage["completion_tokens"]
                metrics["tokens_per_second"] = round(usage["completion_tokens"] / max(ex.seconds, 1e-6), 2)
            if usage.get("prompt_tokens"):
                metrics["prompt_tokens"] = usage["prompt_tokens"]
        if p.get("max-seconds") is not None and ex.seconds > float(p["max-seconds"]):
            raise _Failed("timeout", f"took {ex.seconds:.1f}s, over the {float(p['max-seconds']):g}s budget")
        problem = judge(content, p, prompt)
        if problem:
            raise _Failed("output", f"{problem}; answer: {_excerpt(content)}")
        outputs.append(content)
    if len(set(outputs)) > 1:
        distinct = list(dict.fromkeys(outputs))
        raise _Failed("output", f"{len(outputs)} identical requests at temperature "
                                f"{p.get('temperature', 0)} gave {len(distinct)} different answers: "
                                + " | ".join(_excerpt(o, 80) for o in distinct[:3]))
    return _excerpt(outputs[0]) if len(outputs) == 1 else f"{len(outputs)} identical answers: {_excerpt(outputs[0])}"


def _response_json(ex: Exchange) -> Any:
    if ex.error:
        category = "timeout" if ex.error.startswith("timeout") else "connection"
        raise _Failed(category, ex.error, FAIL if category == "timeout" else ERROR)
    if ex.status != 200:
        raise _Failed("http", f"HTTP {ex.status}: {_error_message(ex.response)}")
    try:
        return ex.json()
    except ValueError:
        raise _Failed("protocol", f"response body is not JSON: {ex.response[:200]!r}") from None


def _content(ex: Exchange) -> tuple[str, dict[str, Any]]:  # the answer, its `usage` (the server's JSON)
    data = _response_json(ex)
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise _Failed("protocol", f"no choices[0].message.content in the answer: {ex.response[:200]!r}") from None
    usage = data.get("usage") if isinstance(data, dict) else None
    return (content or ""), (usage if isinstance(usage, dict) else {})


def _error_message(text: str) -> str:
    """The message of an error body: OpenAI's {"error": {"message": ...}}, older vLLM's flat
    {"object": "error", "message": ...}, FastAPI's {"detail": ...}; else the body itself."""
    try:
        body = json.loads(text)
    except ValueError:
        return text[:300] or "(empty body)"
    if isinstance(body, dict):
        err = body.get("error")
        for holder in (err, body):
            if isinstance(holder, dict):
                for key in ("message", "detail"):
                    if holder.get(key):
                        return str(holder[key])[:300]
        if isinstance(err, str) and err:
            return err[:300]
    return text[:300]


def _excerpt(text: str, n: int = 160) -> str:
    text = text if len(text) <= n else text[:n] + "..."
    return repr(text)


# --------------------------------------------------------------------------------------------- requests

FILLER = ("The sky was blue and the grass was green.", "A small boat drifted slowly along the quiet river.",
          "Children played in the park until the sun went down.", "The baker opened his shop early every morning.",
          "Rain fell softly on the roofs of the old town.", "A tall tree stood alone at the top of the hill.")
TOKENS_PER_SENTENCE = 11


def chat_prompt(p: Mapping[str, Any]) -> str:
    """The prompt of a chat case: as written, or padded to about `long-context-tokens` tokens."""
    tokens = p.get("long-context-tokens")
    if not tokens:
        return str(p["prompt"])
    n = max(2, int(tokens) // TOKENS_PER_SENTENCE)
    fill = [FILLER[i % len(FILLER)] for i in range(n)]
    needle = str(p.get("needle", "4729"))
    question = p.get("prompt") or "What is the secret code? Answer with the number only."
    return " ".join([*fill[:n // 2], f"The secret code is {needle}.", *fill[n // 2:]]) + "\n\n" + question


def chat_body(name: str, p: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The JSON body of a chat completion request for a case (with an image part when the case has one)."""
    prompt = chat_prompt(p)
    content: Any = prompt
    if p.get("image"):
        content = [{"type": "text", "text": prompt},
                   {"type": "image_url", "image_url": {"url": image_data_url(str(p["image"]))}}]
    messages = ([{"role": "system", "content": p["system"]}] if p.get("system") else []) + \
        [{"role": "user", "content": content}]
    body: dict[str, Any] = {"model": model, "messages": messages, "temperature": p.get("temperature", 0),
                            "max_tokens": int(p.get("max-tokens", 64))}
    schema = _schema(p)
    if schema is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": re.sub(r"\W", "_", name), "schema": schema, "strict": True}}
    return body


def _schema(p: Mapping[str, Any]) -> dict[str, Any] | None:  # a JSON schema
    schema = p.get("schema")
    return json.loads(schema) if isinstance(schema, str) else schema


def image_data_url(image: str) -> str:
    """An image (a file, or the built-in red square) as a base64 data: URL for a chat request."""
    if image == "builtin:red-square":
        return "data:image/png;base64," + base64.b64encode(red_square_png()).decode()
    path = Path(image)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"case image {image}: {exc.strerror}",
                         hint="use builtin:red-square or a path to a PNG/JPEG file") from None
    mime = "image/jpeg" if path.suffix.lower() in (".jpg", ".jpeg") else "image/png"
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def red_square_png(size: int = 64) -> bytes:
    """A red square on white, size x size pixels, as PNG bytes (no imaging library needed)."""
    lo, hi = size // 4, size - size // 4
    rows = b"".join(b"\x00" + b"".join(b"\xdd\x11\x11" if lo <= x < hi and lo <= y < hi else b"\xff\xff\xff"
                                       for x in range(size)) for y in range(size))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


# --------------------------------------------------------------------------------------------- judging

_NUMBER = Regex(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
_NEWLINE_RUN = Regex(r"\n(?:[ \t]*\n){4,}")
# One character 8+ times ("!!!!!!!!" from a NaN model), digits aside (1000000000 is a number).
_CHAR_RUN = Regex(r"([^\s\d])\1{7,}")
# A markdown rule or table separator line ("--------", "|:---|---:|") is not a repeated token.
_RULE_LINE = Regex(r"^[\s|:+]*[-=_~*#]{3,}[-=_~*#\s|:+]*$", re.MULTILINE)
# A short piece repeated 8+ times without spaces ("!?!?!?!?...", "abcabcabc...").
_PIECE_RUN = Regex(r"(\S{2,8}?)\1{7,}")
_WORDLIKE = Regex(r"[^\W_]")
MAX_NGRAM = 16
MIN_REPEATS = 3
MIN_REPEATED_WORDS = 8


def judge(content: str, p: Mapping[str, Any], prompt: str) -> str | None:
    """Why `content` is not an acceptable answer to a case with parameters `p`, or None."""
    if not content.strip():
        return "empty answer"
    problem = degeneration(content)
    if problem:
        return f"degenerate output: {problem}"
    schema = _schema(p)
    if schema is not None:
        try:
            doc = json.loads(content)
        except ValueError as exc:
            return f"content is not valid JSON ({exc})"
        try:
            jsonschema.validate(doc, schema)
        except jsonschema.ValidationError as exc:
            return f"JSON does not match the schema: {exc.message}"
    if p.get("expect") and not re.search(str(p["expect"]), content):
        return f"answer does not match /{p['expect']}/"
    if p.get("expect-number") is not None:
        return _check_number(content, str(p["expect-number"]), prompt)
    return None


def _check_number(content: str, expected: str, prompt: str) -> str | None:
    """The expected number is in the answer and no number other than it and the prompt's is."""
    def nums(text: str) -> list[float]:
        return [float(n) for n in _NUMBER.findall(text)]
    got, want = nums(content), float(expected)
    if want not in got:
        return f"expected {expected}, the answer has {', '.join(_NUMBER.findall(content)) or 'no number'}"
    extra = sorted({n for n in got if n != want and n not in set(nums(prompt))})
    if extra:
        return f"expected only {expected}, the answer also has {', '.join(f'{n:g}' for n in extra)}"
    return None


def degeneration(text: str) -> str | None:
    """Runs of blank lines, one character or piece repeated, a reply of punctuation only, or a phrase
    repeated back to back."""
    if _NEWLINE_RUN.search(text):
        return "a run of blank lines"
    if not _WORDLIKE.search(text):
        return f"only punctuation ({len(text.strip())} characters)"
    unruled = _RULE_LINE.sub("", text)
    m = _CHAR_RUN.search(unruled)
    if m:
        return f"{m.group(1)!r} repeated {len(m.group(0))} times"
    m = _PIECE_RUN.search(unruled)
    if m:
        return f"{m.group(1)!r} repeated {len(m.group(0)) // len(m.group(1))} times"
    words = [w.strip(".,;:!?\"'()").lower() for w in text.split()]
    for n in range(1, MAX_NGRAM + 1):
        need = max(MIN_REPEATS, -(-MIN_REPEATED_WORDS // n))
        i = 0
        while i + n * need <= len(words):
            reps = 1
            while words[i + reps * n: i + (reps + 1) * n] == words[i: i + n]:
                reps += 1
            if reps >= need:
                return f"{' '.join(words[i:i + n])!r} repeated {reps} times"
            i += 1
    return None
