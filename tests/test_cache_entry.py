"""A wheel cache entry's entry.json (build/entry.py): one key spelling (kebab-case, as the lock writes the same
tables) written by `put` and read back whole; an entry written before, with its snake_case keys, still reads
as the same facts; a malformed value under either spelling makes the entry unusable (evicted, then rebuilt)."""

from __future__ import annotations

import json

from toolchain.build.built_against import BuiltAgainst
from toolchain.build.cache import WheelCache, read_meta
from toolchain.build.ccache import CacheReport
from toolchain.build.entry import EntryMeta
from toolchain.build.metrics import BuildMetrics
from toolchain.core.fs import sha256_file
from toolchain.core.trust import sealed

KEY = "ab" * 16
OLD = {  # as the tool wrote it before build/entry.py (0.x): snake_case outside, kebab-case inside
    "build_seconds": 12.5, "built_against": [{"name": "torch", "version": "2.9.0+xpu", "cxx11-abi": "1"}],
    "command": ["{python}", "-m", "pip", "wheel", "{src}"], "commit": "c" * 40, "component": "vllm",
    "compiler_cache": {"hits": 3, "launcher": "ccache", "local-hits": 2, "misses": 1, "note": "",
                       "remote-hits": 1, "version": "4.9"},
    "describe": "v0.9.0-3-gcccccccccccc", "env": {"MAX_JOBS": "4"}, "jobs": 4, "jobs_source": "cores",
    "metrics": {"cpu-seconds": 30.0, "peak-memory-bytes": 1024, "peak-memory-source": "cgroup",
                "peak-sampled-bytes": 512, "wall-seconds": 12.0},
    "normalizations": ["timestamps"], "stored": 1700000000.0, "version": "0.9.0",
}


def _wheel(tmp_path):
    wheel = tmp_path / "vllm-0.9.0-py3-none-any.whl"
    wheel.write_bytes(b"not really a zip, only bytes to hash")
    return wheel


def test_put_writes_one_key_spelling_and_get_reads_it_back(tmp_path):
    cache = WheelCache(tmp_path / "cache")
    meta = EntryMeta(component="vllm", commit="c" * 40, build_seconds=1.5, jobs_source="memory",
                     built_against=(BuiltAgainst("torch", "2.9.0+xpu", "1"),), compiler_cache=CacheReport("ccache", hits=2),
                     metrics=BuildMetrics(wall_seconds=1.0), command=("env", "HF_TOKEN=hf_secret_value", "{python}"))
    entry = cache.put(KEY, _wheel(tmp_path), meta)
    text = (entry.wheel.parent / "entry.json").read_text()
    keys = set(json.loads(text))
    assert {"build-seconds", "built-against", "compiler-cache", "jobs-source"} <= keys
    assert not {k for k in keys if "_" in k}
    assert "hf_secret_value" not in text  # secrets masked, in the file and in what `put` returns
    got = cache.get(KEY)
    assert got is not None and got.meta == entry.meta
    assert (got.meta.build_seconds, got.meta.jobs_source, got.meta.compiler_cache.hits) == (1.5, "memory", 2)
    assert got.meta.sha256 == sha256_file(got.wheel) and got.meta.wheel == "vllm-0.9.0-py3-none-any.whl"


def _old_entry(tmp_path, **over):
    wheel = _wheel(tmp_path)
    folder = tmp_path / "cache" / "wheels" / KEY[:2] / KEY
    folder.mkdir(parents=True)
    (folder / wheel.name).write_bytes(wheel.read_bytes())
    data = {**OLD, "wheel": wheel.name, "sha256": sha256_file(wheel), "size": wheel.stat().st_size, **over}
    (folder / "entry.json").write_text(sealed(KEY, data))  # (an entry records its key and checksum: core/trust.py)
    return folder / "entry.json"


def test_an_entry_written_with_the_old_spelling_reads_as_the_same_facts(tmp_path):
    _old_entry(tmp_path)
    got = WheelCache(tmp_path / "cache").get(KEY)
    assert got is not None
    m = got.meta
    assert (m.build_seconds, m.jobs, m.jobs_source, m.version, m.stored) == (12.5, 4, "cores", "0.9.0", 1700000000.0)
    assert m.built_against == (BuiltAgainst("torch", "2.9.0+xpu", "1"),)
    assert (m.compiler_cache.launcher, m.compiler_cache.local_hits, m.compiler_cache.remote_hits) == ("ccache", 2, 1)
    assert m.metrics == BuildMetrics(12.0, 30.0, 1024, "cgroup", 512)
    assert m.command == ("{python}", "-m", "pip", "wheel", "{src}") and m.env == {"MAX_JOBS": "4"}


def test_a_malformed_value_under_either_spelling_is_refused(tmp_path):
    meta_file = _old_entry(tmp_path, build_seconds="fast")
    problem, meta = read_meta(meta_file)
    assert meta is None and "malformed build-seconds" in problem
    data = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**data, "build_seconds": 1.0, "compiler-cache": {"hits": -1}}))
    problem, meta = read_meta(meta_file)
    assert meta is None and "malformed compiler-cache" in problem
    meta_file.write_text(json.dumps({k: v for k, v in data.items() if k != "sha256"} | {"build_seconds": 1.0}))
    problem, meta = read_meta(meta_file)
    assert meta is None and problem == "entry.json has no valid sha256"
