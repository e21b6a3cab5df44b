"""The kernel configuration as a build input: an env value naming a file (VLLM_CHUNK_PREFILL_CONFIG=/path) and a
recipe's `inputs = [...]` are hashed into the cache key and the lock and copied into bundles; editing one between
two builds misses the cache. Smoke triage names the line to add and the rebuild for the missing-tuple error."""

from __future__ import annotations

import tarfile

from tests.spine_helpers import component, counted, recipe_data
from toolchain.core.fs import sha256_file
from toolchain.core.serial import to_table
from toolchain.smoke.triage import load_signatures, triage


def test_a_kernel_config_file_edited_between_two_builds_misses_the_cache(ws, make_repo, tmp_path):
    repo = make_repo("tiny", "tiny")
    prefill = tmp_path / "mine" / "chunk_prefill.py"
    prefill.parent.mkdir()
    prefill.write_text("TUPLES = [(128, 'bf16', True, False)]\n")
    (ws.recipes / "configs").mkdir()
    decode = ws.recipes / "configs" / "paged_decode.py"
    decode.write_text("TUPLES = [(128, 'bf16')]\n")
    counter = tmp_path / "builds"
    env = {"TINY_BUILD_COUNTER": str(counter)}
    ws.recipe("k", recipe_data({"tiny": component(repo, inputs=["configs/paged_decode.py"],
                                                  env={"VLLM_CHUNK_PREFILL_CONFIG": str(prefill)})}))

    def build(*extra: str) -> dict:
        r = ws.build("k", "out", *extra, env=env)
        assert r.returncode == 0, str(r)
        return ws.lock()["components"][0]

    first = build()
    assert counted(counter) == 1
    assert first["inputs"] == [{"path": "configs/paged_decode.py", "sha256": sha256_file(decode)},
                               {"path": "env VLLM_CHUNK_PREFILL_CONFIG", "sha256": sha256_file(prefill)}]
    assert build() == first and counted(counter) == 1  # unchanged: a cache hit

    prefill.write_text("TUPLES = [(128, 'bf16', True, False), (64, 'fp16', True, False)]\n")  # a line added
    second = build()
    assert counted(counter) == 2  # the edit missed the cache: built again
    assert second["cache-key"] != first["cache-key"]
    assert second["inputs"][1]["sha256"] == sha256_file(prefill) != first["inputs"][1]["sha256"]

    decode.write_text("TUPLES = [(128, 'bf16'), (256, 'bf16')]\n")  # the declared input edited too
    third = build("--bundle")
    assert counted(counter) == 3 and third["cache-key"] not in (first["cache-key"], second["cache-key"])
    (tarball,) = (ws.root / "out" / "bundles").glob("*.tar.gz")
    with tarfile.open(tarball) as tar:
        names = {m.name.split("/", 1)[1]: m for m in tar.getmembers() if "/" in m.name}
        for member, original in (("inputs/tiny/paged_decode.py", decode), ("inputs/tiny/chunk_prefill.py", prefill)):
            copied = tar.extractfile(names[member])
            assert copied is not None and copied.read() == original.read_bytes()


def test_a_declared_input_that_is_not_there_is_a_recipe_error(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    ws.recipe("k", recipe_data({"tiny": component(repo, inputs=["configs/nope.py"])}))
    r = ws.build("k")
    assert r.returncode == 2, str(r)
    assert "components.tiny.inputs[0]: configs/nope.py: no such file" in r.json()["error"]


def test_triage_names_the_line_to_add_and_the_rebuild():
    log = ("INFO Starting vLLM API server\n"
           "ERROR RuntimeError: Chunk prefill kernel tuple not compiled for this configuration\n"
           "Add the following entry to csrc/xpu/attn/kernel_configs/chunk_prefill_default.py:\n"
           "    (256, \"bf16\", True, True),\n")
    (finding,) = triage(load_signatures(), log=log)
    assert finding.id == "kernel-tuple-not-compiled"
    assert finding.extracted == '(256, "bf16", True, True),'
    add, rebuild, _ = finding.fixes
    assert add.kind == "recipe" and '`(256, "bf16", True, True),`' in add.text and "VLLM_CHUNK_PREFILL_CONFIG" in add.text
    assert rebuild.kind == "action" and "toolchain build --recipe" in rebuild.text
    assert to_table(finding)["extracted"] == '(256, "bf16", True, True),'
    # without a printed line the fix still says what to add where
    (bare,) = triage(load_signatures(), log="RuntimeError: Paged decode kernel tuple not compiled for this configuration\n")
    assert bare.extracted == "" and "the line it printed" in bare.fixes[0].text
