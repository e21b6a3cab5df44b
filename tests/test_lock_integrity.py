"""The lock and the cache never lie (issue 14).

Table-driven: a lock written and read back is equal (varied locks: unicode, masked secrets, FetchContent,
remote patches, plus seeded random ones); every tampering of a lock (each recorded field kind, deleted and
added components, malformed values, a binary file) is refused by `build --from-lock` with its exit code and
a line naming the key, before anything is built (2) or after a rebuild that does not match (1); every kind of
damaged wheel-cache entry is rebuilt, never served. Everything runs the real CLI on real git repositories.
"""

from __future__ import annotations

import io
import json
import random
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from tests.spine_helpers import TINY_INIT, GitRepo, Workspace, component, recipe_data
from toolchain.build.built_against import BuiltAgainst
from toolchain.build.cache import WheelRef
from toolchain.build.ccache import CacheReport
from toolchain.build.metrics import BuildMetrics
from toolchain.core.fs import sha256_bytes, sha256_file
from toolchain.core.redact import MASK
from toolchain.errors import RecipeError
from toolchain.lock import LOCK_NAME, RECORD_NAME, Lock, LockedComponent, read_lock, write_lock
from toolchain.recipe.model import InputFile, Patch
from toolchain.resolve.closure import Closure, LockedDist
from toolchain.resolve.native import SharedObject, WheelAudit
from toolchain.target.baseenv import BaseDist, BaseEnv
from toolchain.target.facts import TargetInfo, ToolchainInfo

# ---- round trip ----------------------------------------------------------------------------------------


def _component(name: str, **over: Any) -> LockedComponent:
    base = dict(
        name=name, url=f"https://example.invalid/org/{name}.git", ref="main", commit="a" * 40,
        describe="v1.0.0-0-gaaaaaaa", subdir="", after=(), dist=name, import_name=name.replace("-", "_"),
        version="1.0.0", install_args=("--no-deps",), patches=(), env={"MAX_JOBS": "2"},
        command=("{python}", "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "{src}", "-w", "{out}"),
        cache_key="0123456789abcdef0123456789abcdef", build_seconds=1.25,
        wheel=WheelRef(f"{name.replace('-', '_')}-1.0.0-py3-none-any.whl", "b" * 64, 1234))
    base.update(over)
    return LockedComponent(**base)  # type: ignore[arg-type]


def _lock(*components: LockedComponent, **over: Any) -> Lock:
    base = dict(recipe_name="r", recipe_path="recipes/r.toml", recipe_sha256="c" * 64,
                recipe_text='description = "r"\n', toolchain=ToolchainInfo(), target=TargetInfo(),
                smoke={}, components=components, normalizations=("permissions",))
    base.update(over)
    return Lock(**base)  # type: ignore[arg-type]


ROUND_TRIP = {
    "minimal": _lock(_component("tiny")),
    "unicode": _lock(
        _component("moteur", describe="v1.0.0-3-gäöü", env={"GREETING": "grüß dich ✓ 日本語", "EMPTY": ""},
                   command=("{python}", "-c", "print('ünïcödé \"quoted\" \\\\ back')")),
        recipe_name="größe", recipe_text='description = "Größe ✓ — 日本語 \\"q\\""\n',
        smoke={"model": "Qwen/Qwen3-0.6B", "serve-args": ["--chat-template", "✓"], "tensor-parallel-size": 2}),
    "masked secrets": _lock(_component(
        "private", url=f"https://oauth2:{MASK}@gitlab.example.invalid/org/private.git",
        command=("env", f"HF_TOKEN={MASK}", "{python}", "-m", "pip", "wheel", "{src}", "-w", "{out}"),
        env={"HF_TOKEN": MASK, "MAX_JOBS": "4"})),
    "fetchcontent": _lock(_component("kernels", fetchcontent=(
        {"name": "cutlass", "url": "https://example.invalid/cutlass.git", "commit": "d" * 40},
        {"name": "oneDNN", "url": "https://example.invalid/onednn.git", "commit": "e" * 40}))),
    "remote and local patches": _lock(_component("vllm", patches=(
        Patch("vllm/0001-local.patch", "1" * 64),
        Patch("vllm/patches/x.patch", "2" * 64, url="https://example.invalid/intel/llm-scaler.git", commit="3" * 40),
        Patch("p.patch", "4" * 64, url=f"https://oauth2:{MASK}@example.invalid/private.git", commit="5" * 40)))),
    "a full stack": _lock(
        _component("vllm"), _component("vllm-xpu-kernels", after=("vllm",), subdir=""),
        _component("ark", after=("vllm-xpu-kernels",), subdir="auto_round_extension/ark", build_seconds=0.0),
        toolchain=ToolchainInfo("/opt/intel/oneapi/setvars.sh", ("--force",), "2025.2.0", "/opt/intel/oneapi/compiler",
                                "f" * 64),
        target=TargetInfo(runtime="podman", python="python3", python_version="3.12.3", python_tag="cp312",
                          platform="linux_x86_64", pip_version="24.0", torch_version="2.9.0+xpu", torch_xpu="2.9.0",
                          image="localhost/xpu:latest", image_digest="sha256:" + "9" * 64, container=""),
        normalizations=()),
    "every optional table": _lock(
        _component("kernels", built_against=(BuiltAgainst("torch", "2.9.0+xpu", "1"), BuiltAgainst("oneccl", "2021.15")),
                   compiler_cache=CacheReport("none", note="no ccache on PATH"), jobs=3, jobs_source="memory",
                   metrics=BuildMetrics(12.5, 30.25, 2 << 30, "cgroup", 2 << 29),
                   inputs=(InputFile("configs/chunk.json", "7" * 64),)),
        _component("ark", compiler_cache=CacheReport("ccache", "4.10", 3, 1),
                   prebuilt={"url": "https://example.invalid/ark-1.0.0-py3-none-any.whl", "sha256": "8" * 64,
                             "requirement": "ark==1.0.0"}),
        closure=Closure(resolver="uv 0.9.0", indexes=("https://example.invalid/simple",), find_links=(),
                        index_strategy="first-index", python_version="3.12", platform="linux_x86_64",
                        dists=(LockedDist(name="numpy", version="2.1.0", file="numpy-2.1.0-cp312-none-any.whl",
                                    url="https://example.invalid/numpy-2.1.0-cp312-none-any.whl", sha256="6" * 64,
                                        size=99,
                                    index="https://example.invalid/simple", required_by=("kernels",)),),
                        notes=("a note",), resolved_at="2026-01-02T03:04:05Z"),
        base=BaseEnv("example.invalid/vllm@sha256:" + "5" * 64, "sha256:" + "5" * 64, "3.12.3", "2.9.0+xpu", "20250101",
                     (BaseDist("torch", "2.9.0+xpu", "4" * 64), BaseDist("tiny", "1.0"))),
        native=(WheelAudit("kernels-1.0.0-py3-none-any.whl", "b" * 64, "kernels 1.0.0", "built",
                           (SharedObject("kernels/_C.so", "libk.so.1", ("libsycl.so.8", "libze_loader.so.1"),
                                         ("GCC 12",), ("$ORIGIN/.libs",)),
                            SharedObject("kernels/_D.so")), host_provides=("libze_loader.so.1",)),
                WheelAudit("numpy-2.1.0-cp312-none-any.whl", "6" * 64, "numpy 2.1.0", "dependency",
                           libraries=("numpy.libs/libgfortran.so.5",))),
        host={"kernel": "6.12.0", "gpus": []}),
}

EVERY_TABLE_TEXT = (  # how core.serial writes the lock's dataclass tables: renamed keys, defaults left out
    'built-against = [\n    { name = "torch", version = "2.9.0+xpu", cxx11-abi = "1" },\n'
    '    { name = "oneccl", version = "2021.15", cxx11-abi = "" },\n]\n',
    '[[components.inputs]]\npath = "configs/chunk.json"\n',
    'notes = [\n    "a note",\n]\n',
    'size = 99\nindex = "https://example.invalid/simple"\nrequired-by = [\n    "kernels",\n]\n',
    '[base]\nimage = "example.invalid/vllm@sha256:' + "5" * 64 + '"\n',
    'name = "tiny"\nversion = "1.0"\nrecord-sha256 = ""\n',
    '[[native.objects]]\nfile = "kernels/_C.so"\nsoname = "libk.so.1"\n',
    'runpath = [\n    "$ORIGIN/.libs",\n]\n',
    'host-provides = [\n    "libze_loader.so.1",\n]\n',
    'libraries = [\n    "numpy.libs/libgfortran.so.5",\n]\n',
    '[[native.objects]]\nfile = "kernels/_D.so"\nneeded = []\ncompilers = []\n',
)


RECORD_TEXT = (  # what the build record beside the lock holds of the same lock: what its run measured
    '[[components]]\nname = "kernels"\nbuild-seconds = 1.25\njobs = 3\njobs-source = "memory"\n',
    '[components.compiler-cache]\nlauncher = "none"\nversion = ""\nhits = 0\nmisses = 0\nnote = "no ccache on PATH"\n',
    '[components.compiler-cache]\nlauncher = "ccache"\nversion = "4.10"\nhits = 3\nmisses = 1\n'
    'local-hits = 0\nremote-hits = 0\n',  # written even when 0, as the README lists them (issue 40)
    '[components.metrics]\nwall-seconds = 12.5\ncpu-seconds = 30.25\npeak-memory-bytes = 2147483648\n'
    'peak-memory-source = "cgroup"\npeak-sampled-bytes = 1073741824\n',
    '[resolve]\nresolved-at = "2026-01-02T03:04:05Z"\n',
    '[host]\nkernel = "6.12.0"\ngpus = []\n',
)


def test_the_tables_core_serial_writes_keep_the_locks_layout(tmp_path: Path) -> None:
    text = write_lock(ROUND_TRIP["every optional table"], tmp_path).read_text(encoding="utf-8")
    missing = [snippet for snippet in EVERY_TABLE_TEXT if snippet not in text]
    assert not missing, f"{missing}\n---\n{text}"
    for measured in ("build-seconds", "wall-seconds", "compiler-cache", "jobs-source", "resolved-at", "[host]"):
        assert measured not in text, measured  # (the build record's)
    record = (tmp_path / RECORD_NAME).read_text(encoding="utf-8")
    missing = [snippet for snippet in RECORD_TEXT if snippet not in record]
    assert not missing, f"{missing}\n---\n{record}"
    assert read_lock(tmp_path) == ROUND_TRIP["every optional table"]  # the lock and its record read back as one
    (tmp_path / RECORD_NAME).unlink()  # a lock without its record (copied, unpacked): its facts, nothing measured
    alone = read_lock(tmp_path)
    assert alone.component("kernels").metrics == BuildMetrics() and alone.host == {}
    assert alone.closure is not None and alone.closure.resolved_at == ""


def _random_text(rng: random.Random, n: int) -> str:
    alphabet = "abcXYZ019 _-./:=@\"'\\\t{}[]#äß✓日本語🙂\u00a0"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, n)))


def _random_patch(rng: random.Random, i: int, j: int) -> Patch:
    """Local (a path under patches/) or remote (a path in a repository pinned by commit)."""
    path, sha = _random_text(rng, 20) or "p", sha256_bytes(bytes([i, j]))
    if rng.random() < 0.5:
        return Patch(path, sha)
    return Patch(path, sha, url="https://example.invalid/" + _random_text(rng, 8), commit=sha256_bytes(sha.encode())[:40])


def _random_lock(seed: int) -> Lock:
    """A lock with random strings (quotes, backslashes, TOML syntax, non-ASCII) in every free-text field."""
    rng = random.Random(seed)
    comps = []
    for i in range(rng.randint(1, 4)):
        comps.append(_component(
            f"c{i}", describe=_random_text(rng, 20), subdir=_random_text(rng, 10).replace("\\", "/"),
            env={f"V{j}": _random_text(rng, 30) for j in range(rng.randint(0, 3))},
            command=tuple(_random_text(rng, 15) or "x" for _ in range(rng.randint(1, 6))),
            install_args=tuple(_random_text(rng, 8) for _ in range(rng.randint(0, 2))),
            build_seconds=round(rng.random() * 1000, 3),
            patches=tuple(_random_patch(rng, i, j) for j in range(rng.randint(0, 2))),
            wheel=WheelRef(f"c{i}-1.0.{rng.randint(0, 99)}-py3-none-any.whl", sha256_bytes(bytes([i])),
                           rng.randint(0, 2**40))))
    return _lock(*comps, recipe_text=_random_text(rng, 200), recipe_path=_random_text(rng, 30),
                 smoke={"model": _random_text(rng, 10)})


ROUND_TRIP.update({f"random seed {s}": _random_lock(s) for s in range(40)})


@pytest.mark.parametrize("lock", ROUND_TRIP.values(), ids=ROUND_TRIP.keys())
def test_a_written_lock_reads_back_equal_and_rewrites_identically(lock, tmp_path):
    path = write_lock(lock, tmp_path)
    back = read_lock(path)
    assert back == lock
    first = path.read_bytes()
    write_lock(back, tmp_path)
    assert path.read_bytes() == first  # stable: nothing drifts through a read


# ---- a real stack to tamper with ------------------------------------------------------------------------

@dataclass
class Built:
    ws: Workspace
    out: Path
    repos: dict[str, GitRepo]

    def lock_data(self) -> dict:
        return tomlkit.parse((self.out / LOCK_NAME).read_text()).unwrap()


SECRET = "abc123secret"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    """A stack of two components shaped like the real one: a local and a remote (pinned) patch, a FetchContent
    dependency, a subdirectory package, a URL with credentials (through a [mirrors] rewrite) and a command
    with a secret-named assignment. Built once; tests copy what they change."""
    root = tmp_path_factory.mktemp("integrity")
    ws = Workspace(root / "ws")
    repos = {name: GitRepo.create(root / "repos" / name, package, **kw) for name, package, kw in (
        ("tiny", "tiny", {}), ("sub", "distname", {"subdir": "python/pkg"}), ("headers", None, {}),
        ("scaler", None, {}))}
    ws.patch("tiny/p.patch", repos["tiny"].make_patch({"tiny/__init__.py": TINY_INIT + "\nLOCAL = 1\n"}))
    remote = repos["tiny"].make_patch({"tiny/extra.py": "REMOTE = 1\n"}, "a patch kept by an integrator")
    repos["scaler"].commit("vllm patches", {"patches/extra.patch": remote})
    secret_url = f"https://oauth2:{SECRET}@git.example.invalid/org/"
    ws.recipe("r", recipe_data({
        "tiny": component(repos["tiny"], url=secret_url + "tiny", patches=[
            "tiny/p.patch", {"url": repos["scaler"].url, "commit": repos["scaler"].head(),
                             "path": "patches/extra.patch", "sha256": sha256_bytes(remote.encode())}],
            command=["env", f"HF_TOKEN={SECRET}", "{python}", "-m", "pip", "wheel", "--no-build-isolation",
                     "--no-deps", "{src}", "-w", "{out}"]),
        "sub": component(repos["sub"], subdir="python/pkg", dist="other-name", after=["tiny"],
                         fetchcontent=[{"name": "headers", "url": repos["headers"].url,
                                        "commit": repos["headers"].head()}]),
    }, mirrors={secret_url: str(root / "repos") + "/"}))
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    return Built(ws, ws.root / "out", repos)


def test_secrets_in_urls_and_argv_are_masked_everywhere_and_the_lock_still_rebuilds(built, tmp_path):
    """The URL credential and the HF_TOKEN assignment reach no lock, log, log name, entry.json, stderr or
    --json; the masked lock still rebuilds (through the masked [mirrors] rewrite) to the same wheels."""
    ws = built.ws
    everywhere = {str(p): p.read_bytes() for p in [*ws.root.joinpath("out").rglob("*"), *ws.cache.rglob("*")]
                  if p.is_file() and not p.name.endswith((".pack", ".idx", ".rev"))}
    assert not [p for p in everywhere if SECRET in p]  # no file or directory name
    assert not [p for p, data in everywhere.items() if SECRET.encode() in data]
    lock = built.lock_data()
    tiny = lock["components"][0]
    assert tiny["url"] == f"https://oauth2:{MASK}@git.example.invalid/org/tiny"
    assert f"HF_TOKEN={MASK}" in tiny["command"]
    assert SECRET not in lock["recipe"]["text"]
    assert f"oauth2:{MASK}@" in lock["recipe"]["text"]
    entry = json.loads(next(ws.cache.glob(f"wheels/*/{tiny['cache-key']}/entry.json")).read_text())
    assert f"HF_TOKEN={MASK}" in entry["command"]
    # on stderr and in --json, in a failing fetch too
    again = ws.cli("build", "--recipe", "r", "--out", ws.root / "again", "--cache-dir", ws.cache, "-v",
                   "--fresh-sources", "--no-cache")  # no --json: progress on stderr; -v: the build's output
    assert again.returncode == 0, str(again)
    assert f"fetching https://oauth2:{MASK}@git.example.invalid/org/tiny" in again.stderr.replace("\n", "")
    assert SECRET not in again.output
    broken = ws.cli("build", "--recipe", "r", "--out", ws.root / "broken", "--cache-dir", tmp_path / "cache",
                    "--mirror", f"https://oauth2:{SECRET}@git.example.invalid/org/=file:///nonexistent/", "--json")
    assert broken.returncode == 2 and "cannot fetch" in broken.json()["error"], str(broken)
    assert SECRET not in broken.output
    assert not [p for p in (ws.root / "broken").rglob("*") if SECRET in p.name or
                (p.is_file() and SECRET in p.read_text(errors="replace"))]
    plan = ws.cli("plan", "--recipe", "r", "--json")
    assert plan.returncode == 0 and f"oauth2:{MASK}@" in plan.stdout and f"HF_TOKEN={MASK}" in plan.stdout, str(plan)
    assert SECRET not in plan.output
    # the masked lock rebuilds to the same wheels, in a fresh cache
    r = ws.cli("build", "--from-lock", built.out / LOCK_NAME, "--out", tmp_path / "rebuilt", "--cache-dir",
               tmp_path / "fresh", "--json")
    assert r.returncode == 0, str(r)
    assert [c["sha256"] for c in r.json()["components"]] == [c["wheel"]["sha256"] for c in lock["components"]]
    # the key still tells secrets apart: another token is another cache entry
    text = (ws.recipes / "r.toml").read_text()
    (ws.recipes / "r2.toml").write_text(text.replace(f"HF_TOKEN={SECRET}", "HF_TOKEN=other-secret-value"))
    other = ws.build("r2", "other")
    assert other.returncode == 0, str(other)
    assert other.json()["components"][0]["cache-key"] != tiny["cache-key"]


# ---- tampering with a lock ------------------------------------------------------------------------------

Edit = Callable[[dict, Path], Any]  # (parsed lock, its out dir) → changes it in place


def _set(path: str, value: Any) -> Edit:
    """Set a dotted key (components[N] by index) in the parsed lock."""
    def edit(data: dict, out: Path) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        node[int(last) if last.isdigit() else last] = value
    return edit


def _flip(hexdigest: str) -> str:
    return ("0" if hexdigest[0] != "0" else "1") + hexdigest[1:]


def _wheels(edit_wheel: Callable[[Path], object], which: int = 0) -> Edit:
    def edit(data: dict, out: Path) -> None:
        edit_wheel(out / "wheels" / data["components"][which]["wheel"]["file"])
    return edit


def _flip_byte(p: Path) -> None:
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0x01
    p.write_bytes(bytes(b))


def _without_wheels(edit: Edit) -> Edit:
    def both(data: dict, out: Path) -> None:
        edit(data, out)
        shutil.rmtree(out / "wheels")
    return both


def _delete_component(i: int) -> Edit:
    return lambda data, out: data["components"].pop(i)


def _add_component(data: dict, out: Path) -> None:
    extra = json.loads(json.dumps(data["components"][0]))
    extra["name"] = "intruder"
    data["components"].append(extra)


def _duplicate_component(data: dict, out: Path) -> None:
    data["components"].append(json.loads(json.dumps(data["components"][0])))


def _reverse_components(data: dict, out: Path) -> None:
    data["components"].reverse()


def _edit_recipe_text(data: dict, out: Path) -> None:
    data["recipe"]["text"] = data["recipe"]["text"].replace('description = "test recipe"', 'description = "edited"')


def _commit_of(data: dict, out: Path) -> None:  # the commit of another component: a real, fetchable commit
    data["components"][0]["commit"] = data["components"][1]["commit"]


# name: (edit, exit code, text the error must contain)
LOCK_TAMPERING: dict[str, tuple[Edit, int, str]] = {
    # recorded fields against the wheels beside the lock (present: exit 2 before building)
    "wheel sha256, wheels present": (lambda d, o: _set("components.0.wheel.sha256", _flip(d["components"][0]["wheel"]["sha256"]))(d, o), 2, "the lock records"),
    "wheel size, wheels present": (lambda d, o: _set("components.1.wheel.size", d["components"][1]["wheel"]["size"] + 1)(d, o), 2, "bytes), the lock records"),
    "wheel file flipped byte": (_wheels(_flip_byte), 2, "has sha256"),
    "wheel file truncated": (_wheels(lambda p: p.write_bytes(p.read_bytes()[:100])), 2, "(100 bytes), the lock records"),
    "wheel file appended to": (_wheels(lambda p: p.write_bytes(p.read_bytes() + b"x"), 1), 2, "bytes), the lock records"),
    # ... and absent: the rebuild must give the lock's hashes, or exit 1 naming the difference
    "wheel sha256, wheels absent": (_without_wheels(lambda d, o: _set("components.0.wheel.sha256", _flip(d["components"][0]["wheel"]["sha256"]))(d, o)), 1, "the rebuilt wheel has sha256"),
    "wheel size, wheels absent": (_without_wheels(_set("components.1.wheel.size", 7)), 1, "the rebuilt wheel has size"),
    "wheel file name, wheels absent": (_without_wheels(_set("components.0.wheel.file", "tiny-9.9.9-py3-none-any.whl")), 1, "the rebuilt wheel has wheel tiny-1.0.0"),
    # recorded fields against the recipe text the lock embeds
    "commit vs recipe text": (_commit_of, 2, "commit is"),
    "url vs recipe text": (_set("components.1.url", "https://example.invalid/other.git"), 2, "url is"),
    "subdir vs recipe text": (_set("components.1.subdir", "python"), 2, "subdir is"),
    "command vs recipe text": (_set("components.1.command", ["{python}", "-m", "build", "{src}"]), 2, "command is"),
    "env vs recipe text": (_set("components.1.env", {"MAX_JOBS": "64"}), 2, "env is"),
    "after vs recipe text": (_set("components.1.after", []), 2, "after is"),
    "fetchcontent commit": (lambda d, o: _set("components.1.fetchcontent.0.commit", d["components"][0]["commit"])(d, o), 2, "fetchcontent is"),
    "patch dropped": (lambda d, o: d["components"][0]["patches"].pop(), 2, "patches is"),
    "local patch sha256": (lambda d, o: _set("components.0.patches.0.sha256", _flip(d["components"][0]["patches"][0]["sha256"]))(d, o), 2, "patch tiny/p.patch has sha256"),
    "remote patch sha256": (lambda d, o: _set("components.0.patches.1.sha256", _flip(d["components"][0]["patches"][1]["sha256"]))(d, o), 2, "patches/extra.patch has sha256"),
    "recipe sha256": (lambda d, o: _set("recipe.sha256", _flip(d["recipe"]["sha256"]))(d, o), 2, "recipe text has sha256"),
    "recipe text": (_edit_recipe_text, 2, "recipe text has sha256"),
    "last component deleted": (_delete_component(-1), 2, "the recipe text has sub, which the lock does not list"),
    "first component deleted": (_delete_component(0), 2, "the recipe text has tiny, which the lock does not list"),
    "component added": (_add_component, 2, "the lock lists intruder, which the recipe text does not have"),
    "component duplicated": (_duplicate_component, 2, "'tiny' appears twice"),
    "components reordered": (_reverse_components, 2, "in the order sub, tiny"),
    # malformed values: named by key, exit 2
    'size = "abc"': (_set("components.0.wheel.size", "abc"), 2, "components[0] (tiny).wheel.size: must be a non-negative integer, got 'abc'"),
    "size negative": (_set("components.0.wheel.size", -1), 2, "wheel.size: must be a non-negative integer"),
    "size a float": (_set("components.0.wheel.size", 1.5), 2, "wheel.size: must be a non-negative integer"),
    "size a boolean": (_set("components.0.wheel.size", True), 2, "wheel.size: must be a non-negative integer"),
    "sha256 not hex": (_set("components.0.wheel.sha256", "xyz"), 2, "wheel.sha256: must be a 64-hex sha256"),
    "sha256 upper case": (lambda d, o: _set("components.0.wheel.sha256", d["components"][0]["wheel"]["sha256"].upper())(d, o), 2, "wheel.sha256: must be a 64-hex"),
    "commit a branch name": (_set("components.0.commit", "main"), 2, "components[0] (tiny).commit: must be a full commit id"),
    "wheel file with a path": (_set("components.0.wheel.file", "../../etc/tiny-1.0.0-py3-none-any.whl"), 2, "wheel.file: must be a wheel file name"),
    "wheel file not a wheel": (_set("components.0.wheel.file", "passwd"), 2, "wheel.file: must be a wheel file name"),
    "wheel table missing": (lambda d, o: d["components"][0].pop("wheel"), 2, "components[0] (tiny).wheel: missing"),
    "wheel a string": (_set("components.0.wheel", "tiny.whl"), 2, "wheel: must be a table"),
    "command empty": (_set("components.0.command", []), 2, "command: must be a non-empty array of strings"),
    "command not strings": (_set("components.0.command", ["pip", 3]), 2, "command: must be a non-empty array"),
    "name missing": (lambda d, o: d["components"][0].pop("name"), 2, "components[0].name: missing"),
    "name empty": (_set("components.0.name", ""), 2, "name: must be a non-empty string"),
    "env not strings": (_set("components.0.env", {"MAX_JOBS": 2}), 2, "env: must be a table of strings"),
    "patch sha256 not hex": (_set("components.0.patches.0.sha256", "nope"), 2, "patches[0].sha256: must be a 64-hex"),
    "patch not a table": (_set("components.0.patches.0", "p.patch"), 2, "patches[0]: must be a table"),
    "fetchcontent commit short": (_set("components.1.fetchcontent.0.commit", "abc"), 2, "fetchcontent[0].commit: must be a full commit id"),
    "build-seconds text": (_set("components.0.build-seconds", "fast"), 2, "build-seconds: must be a non-negative number"),
    "an unknown key in a recorded table": (_set("components.0.metrics", {"wall-seconds": 1.0, "peak-memroy-bytes": 5}), 2,
                                           "malformed lock (unknown key(s) for BuildMetrics: peak-memroy-bytes)"),
    "cache-key not hex": (_set("components.0.cache-key", "key!"), 2, "cache-key: must be a hex digest"),
    "components a table": (_set("components", {"tiny": {}}), 2, "components: must be an array of tables"),
    "components missing": (lambda d, o: d.pop("components"), 2, "components: must be an array of tables"),
    "components empty": (_set("components", []), 2, "the recipe text has tiny, sub, which the lock does not list"),
    "a component not a table": (_set("components.0", "tiny"), 2, "components[0]: must be a table"),
    "recipe missing": (lambda d, o: d.pop("recipe"), 2, "recipe: must be a table"),
    "recipe sha256 not hex": (_set("recipe.sha256", "0"), 2, "recipe.sha256: must be a 64-hex sha256"),
    "recipe text not TOML": (_set("recipe.text", "[[[ not toml"), 2, "not valid TOML"),
    "recipe text invalid recipe": (_set("recipe.text", 'description = "no components"\n'), 2, "the recorded recipe:"),
    "toolchain unknown key": (_set("toolchain.compiler", "gcc"), 2, "toolchain.compiler: not a key"),
    "target value not a string": (_set("target.python-version", 3.11), 2, "target.python-version: must be a string"),
    "lock-version 2": (_set("lock-version", 2), 2, "lock-version 2 is not supported"),
    "lock-version missing": (lambda d, o: d.pop("lock-version"), 2, "lock-version None is not supported"),
}

RAW_TAMPERING: dict[str, tuple[bytes, str]] = {  # the whole file replaced
    "binary": (bytes(range(256)) * 4, "not UTF-8 text"),
    "binary after a valid start": (b"lock-version = 1\n\xff\xfe\x00garbage", "not UTF-8 text"),
    "not TOML": (b"this is [not toml", "not valid TOML"),
    "empty": (b"", "lock-version None is not supported"),
    "a NUL inside": (b"lock-version = 1\n\x00\n", "not valid TOML"),
}


def _copy_out(built: Built, tmp_path: Path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(built.out, out)
    return out


def _from_lock(built: Built, lock: Path, out: Path):
    return built.ws.cli("build", "--from-lock", lock, "--out", out, "--cache-dir", built.ws.cache, "--json")


def test_an_untouched_lock_rebuilds_to_its_own_hashes(built, tmp_path):
    out = _copy_out(built, tmp_path)
    shutil.rmtree(out / "wheels")
    r = _from_lock(built, out / LOCK_NAME, tmp_path / "rebuilt")
    assert r.returncode == 0, str(r)
    assert [(c["wheel"], c["sha256"]) for c in r.json()["components"]] == \
        [(c["wheel"]["file"], c["wheel"]["sha256"]) for c in built.lock_data()["components"]]


def test_a_lock_whose_recipe_text_another_writer_laid_out_still_rebuilds(built, tmp_path):
    """Locks written before the tool wrote TOML with tomli-w hold the recipe text as tomlkit laid it out (and
    its sha256): the recorded text is checked as recorded, not against this version's layout of it."""
    from toolchain.core.fs import sha256_bytes
    from toolchain.core.toml import dumps, loads

    out = _copy_out(built, tmp_path)
    data = built.lock_data()
    text = tomlkit.dumps(loads(data["recipe"]["text"]))
    assert text != dumps(loads(text))  # laid out differently: arrays on one line, not one item per line
    data["recipe"]["text"], data["recipe"]["sha256"] = text, sha256_bytes(text.encode())
    (out / LOCK_NAME).write_text(tomlkit.dumps(data))
    shutil.rmtree(out / "wheels")
    r = _from_lock(built, out / LOCK_NAME, tmp_path / "rebuilt")
    assert r.returncode == 0, str(r)
    assert [(c["wheel"], c["sha256"]) for c in r.json()["components"]] == \
        [(c["wheel"]["file"], c["wheel"]["sha256"]) for c in built.lock_data()["components"]]


@pytest.mark.parametrize("case", LOCK_TAMPERING, ids=list(LOCK_TAMPERING))
def test_every_tampering_of_a_lock_is_refused(built, tmp_path, case):
    edit, code, expected = LOCK_TAMPERING[case]
    out = _copy_out(built, tmp_path)
    data = built.lock_data()
    edit(data, out)
    (out / LOCK_NAME).write_text(tomlkit.dumps(data))
    before = (out / LOCK_NAME).read_bytes()
    rebuilt = tmp_path / "rebuilt"
    r = _from_lock(built, out / LOCK_NAME, rebuilt)
    assert r.returncode == code, str(r)
    assert "Traceback" not in r.stderr, str(r)
    error = r.json()["error"]
    assert expected in error, error
    assert (out / LOCK_NAME).read_bytes() == before  # the lock given is never rewritten
    if code == 2:
        assert not rebuilt.exists()  # refused before anything was built or written
    else:
        assert not (rebuilt / LOCK_NAME).exists()  # a rebuild that does not match writes no lock


@pytest.mark.parametrize("case", RAW_TAMPERING, ids=list(RAW_TAMPERING))
def test_a_lock_file_that_is_not_a_lock_is_refused(built, tmp_path, case):
    content, expected = RAW_TAMPERING[case]
    lock = tmp_path / LOCK_NAME
    lock.write_bytes(content)
    r = _from_lock(built, lock, tmp_path / "rebuilt")
    assert r.returncode == 2, str(r)
    assert "Traceback" not in r.stderr and expected in r.json()["error"] and str(lock) in r.json()["error"], str(r)
    assert not (tmp_path / "rebuilt").exists()
    with pytest.raises(RecipeError):  # and for every other reader of locks (smoke --lock, bisect, bundles)
        read_lock(lock)


def test_a_lock_names_every_malformed_key_at_once(built, tmp_path):
    data = built.lock_data()
    data["components"][0]["wheel"]["size"] = "abc"
    data["components"][1]["commit"] = "HEAD"
    data["recipe"]["sha256"] = "short"
    (tmp_path / LOCK_NAME).write_text(tomlkit.dumps(data))
    with pytest.raises(RecipeError) as err:
        read_lock(tmp_path / LOCK_NAME)
    assert [p.split(": ", 1)[1] for p in err.value.problems] == [
        "recipe.sha256: must be a 64-hex sha256, got 'short'",
        "components[0] (tiny).wheel.size: must be a non-negative integer, got 'abc'",
        "components[1] (sub).commit: must be a full commit id (40 or 64 hex), got 'HEAD'"]


# ---- tampering with the wheel cache ---------------------------------------------------------------------

def _entry(cache: Path, key: str) -> Path:
    return cache / "wheels" / key[:2] / key


def _entry_json(change: Callable[[dict], Any]) -> Callable[[Path], None]:
    def edit(entry: Path) -> None:
        meta = json.loads((entry / "entry.json").read_text())
        change(meta)
        (entry / "entry.json").write_text(json.dumps(meta))
    return edit


def _same_size_other_wheel(p: Path) -> None:
    """A valid wheel with other content (tiny/__init__.py cut short), padded to the size of `p` with a zip
    comment: the size check alone cannot tell it from the real one."""
    size = p.stat().st_size
    with zipfile.ZipFile(p) as z:
        members = {i.filename: z.read(i) for i in z.infolist()}
    members["tiny/__init__.py"] = b"GREETING = 'tampered'\n"

    def zipped(comment: bytes) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data in members.items():
                z.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
            z.comment = comment
        return buf.getvalue()

    data = zipped(b"x" * (size - len(zipped(b""))))
    assert len(data) == size
    p.write_bytes(data)


def _empty(directory: Path) -> None:
    for p in directory.iterdir():
        p.unlink()


def _wheel_of(entry: Path) -> Path:
    (wheel,) = entry.glob("*.whl")
    return wheel


CACHE_TAMPERING: dict[str, Callable[[Path], object]] = {
    "wheel byte flipped (same size)": lambda e: _flip_byte(_wheel_of(e)),
    "wheel truncated": lambda e: _wheel_of(e).write_bytes(_wheel_of(e).read_bytes()[:200]),
    "wheel emptied": lambda e: _wheel_of(e).write_bytes(b""),
    "wheel deleted": lambda e: _wheel_of(e).unlink(),
    "wheel replaced by another valid wheel of the same size": lambda e: _same_size_other_wheel(_wheel_of(e)),
    "entry.json deleted": lambda e: (e / "entry.json").unlink(),
    "entry.json garbage": lambda e: (e / "entry.json").write_bytes(b"\x00\xffnot json{"),
    "entry.json empty": lambda e: (e / "entry.json").write_text(""),
    "entry.json a list": lambda e: (e / "entry.json").write_text("[]"),
    "entry.json wrong sha256": _entry_json(lambda m: m.update(sha256=_flip(m["sha256"]))),
    "entry.json sha256 missing": _entry_json(lambda m: m.pop("sha256")),
    "entry.json wrong size": _entry_json(lambda m: m.update(size=m["size"] + 1)),
    "entry.json size a string": _entry_json(lambda m: m.update(size=str(m["size"]))),
    "entry.json wheel escapes the entry": _entry_json(lambda m: m.update(wheel="../../../" + m["wheel"])),
    "entry directory emptied": _empty,
}


@pytest.fixture(scope="module")
def clean_hashes(built) -> dict[str, str]:
    return {c["name"]: c["wheel"]["sha256"] for c in built.lock_data()["components"]}


@pytest.mark.parametrize("case", CACHE_TAMPERING, ids=list(CACHE_TAMPERING))
def test_a_damaged_cache_entry_is_rebuilt_never_served(built, clean_hashes, tmp_path, case):
    cache = tmp_path / "cache"
    shutil.copytree(built.ws.cache, cache, symlinks=True)
    key = built.lock_data()["components"][0]["cache-key"]  # tiny: patched, with a secret in its command
    CACHE_TAMPERING[case](_entry(cache, key))
    counter = tmp_path / "builds"
    r = built.ws.build("r", str(tmp_path / "out"), env={"TINY_BUILD_COUNTER": str(counter)}, cache=cache)
    assert r.returncode == 0, str(r)
    built_now = counter.read_text().splitlines() if counter.exists() else []
    assert [line.split()[0] for line in built_now] == ["tiny"]  # that one was rebuilt, the other served
    assert "wheel cache entry" in r.stderr
    assert key in r.stderr.replace("\n", "")
    got = {c["name"]: c["sha256"] for c in r.json()["components"]}
    assert got == clean_hashes
    for c in r.json()["components"]:
        assert sha256_file(Path(c["path"])) == c["sha256"]
    meta = json.loads((_entry(cache, key) / "entry.json").read_text())  # the entry is whole again
    assert meta["sha256"] == clean_hashes["tiny"] == sha256_file(_entry(cache, key) / meta["wheel"])
    again = built.ws.build("r", str(tmp_path / "again"), env={"TINY_BUILD_COUNTER": str(counter)}, cache=cache)
    assert again.returncode == 0 and len(counter.read_text().splitlines()) == 1, str(again)  # now a hit


def test_no_cache_replaces_a_damaged_entry_with_the_rebuilt_one(built, clean_hashes, tmp_path):
    """--no-cache builds again and the new entry wins over the stored one (a rebuilt entry used to lose)."""
    cache = tmp_path / "cache"
    shutil.copytree(built.ws.cache, cache, symlinks=True)
    key = built.lock_data()["components"][0]["cache-key"]
    _flip_byte(_wheel_of(_entry(cache, key)))
    r = built.ws.build("r", str(tmp_path / "out"), "--no-cache", cache=cache)
    assert r.returncode == 0, str(r)
    assert sha256_file(_wheel_of(_entry(cache, key))) == clean_hashes["tiny"]
    assert {c["name"]: c["sha256"] for c in r.json()["components"]} == clean_hashes


def test_a_warm_rebuild_into_the_same_out_dir_keeps_serving_the_lock_s_wheels(built, clean_hashes, tmp_path):
    """With the out dir's wheels already matching, a damaged entry is not copied: the lock still matches
    out/wheels; the next build into another out dir finds the damage and rebuilds."""
    cache = tmp_path / "cache"
    shutil.copytree(built.ws.cache, cache, symlinks=True)
    key = built.lock_data()["components"][0]["cache-key"]
    first = built.ws.build("r", str(tmp_path / "warm"), cache=cache)
    assert first.returncode == 0, str(first)
    _flip_byte(_wheel_of(_entry(cache, key)))
    warm = built.ws.build("r", str(tmp_path / "warm"), cache=cache)
    assert warm.returncode == 0, str(warm)
    for c in warm.json()["components"]:
        assert sha256_file(Path(c["path"])) == c["sha256"] == clean_hashes[c["name"]]
    elsewhere = built.ws.build("r", str(tmp_path / "elsewhere"), cache=cache)
    assert elsewhere.returncode == 0 and "damaged" in elsewhere.stderr, str(elsewhere)
    assert {c["name"]: c["sha256"] for c in elsewhere.json()["components"]} == clean_hashes


def test_the_tables_cover_every_recorded_field_kind():
    """The issue's list of field kinds (wheel sha256, size, commit vs recipe text, recipe sha256, patch sha256,
    deleted and added component) each has a tampering above; run with -s for the counts."""
    names = " ".join(LOCK_TAMPERING)
    missing = [k for k in ("wheel sha256", "size", "commit vs recipe text", "recipe sha256", "patch sha256",
                           "component deleted", "component added") if k not in names]
    assert not missing, missing
    print(f"\nlock tamperings: {len(LOCK_TAMPERING)}, non-lock files: {len(RAW_TAMPERING)}, "
          f"cache damages: {len(CACHE_TAMPERING)}, round-tripped locks: {len(ROUND_TRIP)}")
