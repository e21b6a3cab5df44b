"""The realstack fixture (tests/support/realstack.py: engine like vLLM, C-extension kernels with pre-fetched
FetchContent sources like vllm-xpu-kernels, ARK in a subdirectory like auto-round-lib, stand-in oneAPI)
driven through every command as a real process: plan, build (cold and warm), build --from-lock,
verify-repro, build --bundle, bisect of one component and bisect between two locks."""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tarfile
from pathlib import Path

import pytest

from tests.spine_helpers import STANDIN, STANDIN_SETVARS, lock_and_record, wheel_member
from tests.support.realstack import (
    ARK_DIST,
    ARK_PATCH,
    DESCRIBE,
    ENGINE_DIST,
    ENGINE_PATCH,
    FIRST_BAD,
    KERNELS_DIST,
    KERNELS_TEST,
    cli_in,
    read_toml,
    run_with_wheels,
    sha256_file,
)
from toolchain.sources.mirrors import Mirrors

pytestmark = pytest.mark.slow

ORDER = ["engine", "kernels", "ark"]
CHECK_WHEELS = """
import json, realstack_engine, realstack_kernels, realstack_ark
from importlib.metadata import version
try:
    realstack_engine.generate("")
    patched = False
except ValueError:
    patched = True
print(json.dumps({
    "engine": realstack_engine.generate("hi"), "engine_patched": patched,
    "scale": realstack_kernels.scale(), "onednn": realstack_kernels.onednn_version(),
    "cutlass": realstack_kernels.cutlass_revision(), "compiler": realstack_kernels.compiler(),
    "ark_devices": list(getattr(realstack_ark, "SUPPORTED_DEVICES", ())),
    "ark_user_tuned": getattr(realstack_ark, "USER_TUNED", False),
    "versions": [version(d) for d in ("realstack-engine", "realstack-kernels", "realstack-ark-lib")],
}))
"""


def expected_version(component: str, describe: str) -> str:
    """The version each project derives from `git describe --tags --long` (see the fixture projects)."""
    tag, distance, sha = describe.rsplit("-", 2)
    if component == "ark":
        return "0.5.0"  # version.py, BUILD_MODE=release
    major, minor, patch = tag.lstrip("v").split(".")
    base = f"{major}.{minor}.{int(patch) + 1}.dev{distance}+{sha}" if distance != "0" else tag.lstrip("v")
    return base + (".xpu" if "+" in base else "+xpu") if component == "engine" else base


def assert_describe(describe: str, tag: str, distance: int, commit: str) -> None:
    m = re.fullmatch(rf"{re.escape(tag)}-{distance}-g([0-9a-f]{{7,40}})", describe)
    assert m and commit.startswith(m.group(1)), (describe, tag, distance, commit)


def assert_wheels_match(lock: dict, out: Path) -> None:
    for c in lock["components"]:
        wheel = out / "wheels" / c["wheel"]["file"]
        assert sha256_file(wheel) == c["wheel"]["sha256"] and wheel.stat().st_size == c["wheel"]["size"], c["name"]
    # (wheels/deps/ is where a smoke of the shared lock, by another test, fetches the locked closure)
    assert sorted(p.name for p in (out / "wheels").iterdir() if p.name != "deps") == sorted(
        c["wheel"]["file"] for c in lock["components"])


# ---- plan ------------------------------------------------------------------------------------------------

def test_plan_resolves_every_component_exactly_as_the_build_does(realstack_built, tmp_path):
    s, built = realstack_built.stack, realstack_built.lock()
    cli = cli_in(tmp_path / "cwd")
    r = cli("plan", "--recipe", s.stack, "--cache-dir", realstack_built.cache, "--json")
    assert r.returncode == 0, str(r)
    plan = r.json()
    assert plan["recipe"]["path"] == str(s.stack)
    assert plan["recipe"]["sha256"] == built["recipe"]["sha256"]
    tc = plan["toolchain"]
    assert tc["setvars"] == str(STANDIN_SETVARS)
    assert tc["oneapi-version"] == "2025.2.0"
    assert tc["cmplr-root"] == str(STANDIN)
    assert tc["env"]["TOOLCHAIN_ONEAPI_STANDIN"] == "1"
    comps = {c["name"]: c for c in plan["components"]}
    assert [c["name"] for c in plan["components"]] == ORDER
    locked = {c["name"]: c for c in built["components"]}
    for name in ORDER:
        assert comps[name]["commit"] == s.commit_of(name) == locked[name]["commit"]
        assert comps[name]["cache-key"] == locked[name]["cache-key"]  # the plan predicts the build
        assert comps[name]["url"] == s.repo_of(name).url
    assert comps["engine"]["patches"] == [{"path": ENGINE_PATCH, "sha256": sha256_file(s.patch_file(ENGINE_PATCH)),
                                           "found-in": str(s.patch_file(ENGINE_PATCH))[:-len(ENGINE_PATCH) - 1]}]
    assert comps["ark"]["patches"] == [{"path": ARK_PATCH, "sha256": sha256_file(s.patch_file(ARK_PATCH)),
                                       "found-in": str(s.patch_file(ARK_PATCH))[:-len(ARK_PATCH) - 1],
                                       "applied-at": "subdir"}]  # ARK in a subdirectory: which form applied
    assert comps["kernels"]["patches"] == []
    assert comps["ark"]["subdir"] == "ext/ark"
    assert comps["ark"]["after"] == ["kernels"]
    assert comps["kernels"]["fetchcontent"] == [
        {"name": "oneDNN", "url": s.onednn.url, "commit": s.onednn_commit},
        {"name": "cutlass-sycl", "url": s.cutlass.url, "commit": s.cutlass_commit}]
    # the exact command and env of the kernels' build: setup.py in the tree, both deps handed over
    argv, env = comps["kernels"]["argv"], comps["kernels"]["build-env"]
    assert argv[:5] == [sys.executable, "setup.py", "-q", "bdist_wheel", "--dist-dir"]
    trees = str(realstack_built.cache / "trees")
    (onednn,) = re.findall(r"-DFETCHCONTENT_SOURCE_DIR_ONEDNN=(\S+)", env["CMAKE_ARGS"])
    assert onednn.startswith(trees)
    assert env["REALSTACK_CUTLASS_SRC_DIR"].startswith(trees)
    assert env["CMPLR_ROOT"] == str(STANDIN)
    assert env["CMAKE_BUILD_TYPE"] == "Release"
    assert comps["ark"]["build-env"]["BUILD_MODE"] == "release"
    assert comps["ark"]["argv"][-3].endswith("/ext/ark")  # {src} is the checkout + subdir

    human = cli("plan", "--recipe", s.stack, "--cache-dir", realstack_built.cache)
    assert human.returncode == 0, str(human)
    for name in ORDER:
        assert name in human.stdout
        assert s.commit_of(name)[:12] in human.stdout


# ---- build -----------------------------------------------------------------------------------------------

def test_cold_build_lock_records_the_stack(realstack_built):
    s, out = realstack_built.stack, realstack_built.out
    assert realstack_built.lock()["recipe"]["path"] == "recipes/stack.toml"  # (the lock: where its project has it)
    lock = lock_and_record(out)  # (this machine's paths and what the run measured: the build record's part)
    assert lock["recipe"]["name"] == "stack"
    assert lock["recipe"]["path"] == str(s.stack)
    assert lock["recipe"]["sha256"] == hashlib.sha256(lock["recipe"]["text"].encode()).hexdigest()
    tc = lock["toolchain"]
    assert tc["setvars"] == str(STANDIN_SETVARS)
    assert tc["oneapi-version"] == "2025.2.0"
    assert tc["cmplr-root"] == str(STANDIN)
    assert tc["setvars-args"] == ["--force"]
    assert [c["name"] for c in lock["components"]] == ORDER  # install order (after = ...)
    comps = {c["name"]: c for c in lock["components"]}
    for name in ORDER:
        c = comps[name]
        assert c["commit"] == s.commit_of(name)
        assert c["url"] == s.repo_of(name).url
        assert_describe(c["describe"], *DESCRIBE[name], c["commit"])
        # the describe the lock records is the one the build saw: versions from git describe in the checkout
        assert c["version"] == expected_version(name, c["describe"]), (name, c["version"], c["describe"])
        assert f"-{c['version']}-" in c["wheel"]["file"]
        assert c["build-seconds"] > 0
        assert re.fullmatch(r"[0-9a-f]{32}", c["cache-key"])
    assert comps["engine"]["wheel"]["file"].startswith("realstack_engine-0.3.1.dev2+g")
    assert comps["engine"]["wheel"]["file"].endswith(".xpu-py3-none-any.whl")
    assert comps["kernels"]["wheel"]["file"].startswith("realstack_kernels-0.1.2.dev1+g")
    assert re.search(r"-cp3\d+-cp3\d+-linux_\w+\.whl$", comps["kernels"]["wheel"]["file"])  # a C extension
    assert comps["ark"]["wheel"]["file"] == "realstack_ark_lib-0.5.0-py3-none-any.whl"  # BUILD_MODE=release
    assert [(c["name"], c["dist"]) for c in lock["components"]] == [
        ("engine", ENGINE_DIST), ("kernels", KERNELS_DIST), ("ark", ARK_DIST)]
    assert comps["engine"]["patches"] == [{"path": ENGINE_PATCH, "sha256": sha256_file(s.patch_file(ENGINE_PATCH))}]
    assert comps["ark"]["patches"] == [{"path": ARK_PATCH, "sha256": sha256_file(s.patch_file(ARK_PATCH)),
                                       "applied-at": "subdir"}]  # ARK in a subdirectory: which form applied
    assert comps["kernels"]["patches"] == []
    assert comps["ark"]["subdir"] == "ext/ark"
    assert comps["ark"]["after"] == ["kernels"]
    assert comps["kernels"]["after"] == ["engine"]
    assert comps["engine"]["subdir"] == ""
    assert comps["kernels"]["fetchcontent"] == [
        {"name": "oneDNN", "url": s.onednn.url, "commit": s.onednn_commit},
        {"name": "cutlass-sycl", "url": s.cutlass.url, "commit": s.cutlass_commit}]
    assert comps["ark"]["env"] == {"MAX_JOBS": "2", "BUILD_MODE": "release", "ARK_SYCL_TARGET": "intel_gpu_bmg_g31"}
    assert comps["engine"]["install-args"] == []
    assert comps["kernels"]["install-args"] == ["--no-deps", "--force-reinstall"]
    assert_wheels_match(lock, out)
    pylock = read_toml(out / "pylock.toml")
    assert [(p["name"], p["wheels"][0]["path"], p["wheels"][0]["hashes"]["sha256"]) for p in pylock["packages"]] == [
        (c["dist"], f"wheels/{c['wheel']['file']}", c["wheel"]["sha256"]) for c in lock["components"]]
    data = realstack_built.result.json()
    assert data["ok"] is True
    assert [c["sha256"] for c in data["components"]] == [
        c["wheel"]["sha256"] for c in lock["components"]]
    assert [c["describe"] for c in data["components"]] == [c["describe"] for c in lock["components"]]
    for name in ORDER:
        log = (out / "logs" / f"{name}.log").read_text()
        assert s.commit_of(name) in log


def test_the_built_wheels_carry_the_patches_the_pinned_deps_and_the_toolchain(realstack_built, tmp_path):
    lock = realstack_built.lock()
    wheels = [realstack_built.out / "wheels" / c["wheel"]["file"] for c in lock["components"]]
    r = run_with_wheels(wheels, CHECK_WHEELS, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    seen = json.loads(r.stdout)
    assert seen["engine"] == "Hello from realstack: hi"
    assert seen["engine_patched"] is True
    assert seen["scale"] == 3.0                      # K[8] carries the regression (bisected below)
    assert seen["onednn"] == "3.13"
    assert seen["cutlass"] == "pinned"
    assert seen["compiler"] == "2025.2.0"            # built in the stand-in oneAPI environment
    assert seen["ark_devices"] == ["bmg-g21", "bmg-g31"]
    assert seen["ark_user_tuned"] is False
    assert seen["versions"] == [c["version"] for c in lock["components"]]
    out = realstack_built.out
    ark = json.loads(wheel_member(out, "realstack_ark/_build_info.json", "realstack_ark_lib-*.whl"))["env"]
    assert ark["ARK_SYCL_TARGET"] == "intel_gpu_bmg_g31"
    assert ark["BUILD_MODE"] == "release"
    assert ark["CMPLR_ROOT"] == str(STANDIN)
    assert ark["REALSTACK_COMPILER_VERSION"] == "2025.2"
    engine = json.loads(wheel_member(out, "realstack_engine/_build_info.json", "realstack_engine-*.whl"))["env"]
    assert engine["REALSTACK_TARGET_DEVICE"] == "xpu"
    assert engine["MAX_JOBS"] == "2"


def test_a_warm_build_is_all_cache_hits_with_the_same_lock(realstack_built, tmp_path):
    s = realstack_built.stack
    entries = sorted(p for p in (realstack_built.cache / "wheels").rglob("entry.json"))
    stamps = {p: p.stat().st_mtime_ns for p in entries}
    r = realstack_built.cli("build", "--recipe", s.stack, "--cache-dir", realstack_built.cache,
                            "--out", tmp_path / "warm", "--json")
    assert r.returncode == 0, str(r)
    warm = read_toml(tmp_path / "warm" / "stack.lock.toml")
    assert warm["components"] == realstack_built.lock()["components"]
    assert_wheels_match(warm, tmp_path / "warm")
    warm_by_name = {c["name"]: c for c in warm["components"]}
    for name in ORDER:
        log = (tmp_path / "warm" / "logs" / f"{name}.log").read_text()
        key = warm_by_name[name]["cache-key"]
        built = (realstack_built.cache / "wheels" / key[:2] / key / "build.log").read_text()
        head = log[: len(log) - len(built)]  # nothing built: the log is the cached build's, under a header
        assert log.endswith(built) and "# wheel cache hit:" in head and "copied from the cache" in head, log
        assert "$ " not in head, log
    assert {p: p.stat().st_mtime_ns for p in entries} == stamps  # nothing stored again


def test_from_lock_in_a_fresh_cache_rebuilds_the_same_bytes(realstack_built, tmp_path):
    cli = cli_in(tmp_path / "cwd")
    r = cli("build", "--from-lock", realstack_built.lock_path, "--out", tmp_path / "again",
            "--cache-dir", tmp_path / "fresh-cache", "--json")
    assert r.returncode == 0, str(r)
    old, new = realstack_built.lock(), read_toml(tmp_path / "again" / "stack.lock.toml")
    assert new["recipe"] == old["recipe"]
    for a, b in zip(old["components"], new["components"], strict=True):
        assert (b["name"], b["commit"], b["describe"], b["cache-key"], b["patches"], b.get("fetchcontent")) == \
            (a["name"], a["commit"], a["describe"], a["cache-key"], a["patches"], a.get("fetchcontent"))
        assert b["wheel"] == a["wheel"], b["name"]  # compiled again from scratch: the same bytes
    assert_wheels_match(new, tmp_path / "again")
    assert list((tmp_path / "fresh-cache" / "wheels").rglob("entry.json"))  # really built there


def test_verify_repro_builds_the_stack_twice_identically(realstack_built, tmp_path):
    s = realstack_built.stack
    cli = cli_in(tmp_path / "cwd")
    r = cli("verify-repro", "--recipe", s.stack, "--cache-dir", realstack_built.cache, "--work-dir",
            tmp_path / "work", "--no-diffoscope", "--json")
    assert r.returncode == 0, str(r)
    data = r.json()
    assert data["ok"] is True
    assert data["mode"] == "recipe"
    assert sorted(data["identical"]) == sorted(c["wheel"]["file"] for c in realstack_built.lock()["components"])
    assert not data["differing"]


def test_bundle_holds_the_stack_wheels_locks_patches_and_sums(realstack_built, tmp_path):
    s = realstack_built.stack
    cli = cli_in(tmp_path / "cwd")
    out = tmp_path / "dist" / "stack"
    r = cli("build", "--recipe", s.stack, "--cache-dir", realstack_built.cache, "--out", out, "--bundle", "--json")
    assert r.returncode == 0, str(r)
    bundle = Path(r.json()["bundle"])
    assert bundle.is_dir()
    assert bundle.name.startswith("stack-")
    lock = read_toml(bundle / "stack.lock.toml")
    assert [c["wheel"] for c in lock["components"]] == [c["wheel"] for c in realstack_built.lock()["components"]]
    assert_wheels_match(lock, bundle)
    assert (bundle / "patches" / ENGINE_PATCH).read_bytes() == s.patch_file(ENGINE_PATCH).read_bytes()
    assert (bundle / "patches" / ARK_PATCH).read_bytes() == s.patch_file(ARK_PATCH).read_bytes()
    sums = {rel: digest for digest, rel in (line.split(None, 1) for line in (bundle / "SHA256SUMS").read_text().splitlines())}
    for rel, digest in sums.items():
        assert sha256_file(bundle / rel.lstrip("*")) == digest, rel
    assert any(rel.startswith("wheels/realstack_kernels-") for rel in sums)
    sbom = json.loads((bundle / "sbom.cdx.json").read_text())
    assert {"oneDNN", "cutlass-sycl"} <= {c["name"] for comp in sbom["components"] for c in comp.get("components", ())}
    tarball = bundle.with_name(bundle.name + ".tar.gz")
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    assert any(n.endswith("stack.lock.toml") for n in names)
    assert sum(n.endswith(".whl") for n in names) == 3


# ---- bisect ----------------------------------------------------------------------------------------------

@pytest.fixture
def kernels_test(tmp_path) -> str:
    script = tmp_path / "kernels_test.py"
    script.write_text(KERNELS_TEST)
    return f"{sys.executable} {script}"


def test_bisect_the_kernels_commits(realstack_built, kernels_test, tmp_path):
    """bisect.toml is the stack without local patches (the patched stack: test_cli_with_realstack.py, symptom 1)."""
    s = realstack_built.stack
    k = s.kernels_commits
    cli = cli_in(tmp_path / "cwd")
    out = tmp_path / "bisect"
    r = cli("bisect", "--recipe", s.bisect_recipe, "--component", "kernels", "--good", k[0], "--bad", k[-1],
            "--test-cmd", kernels_test, "--cache-dir", realstack_built.cache, "--out", out, "--jobs", "1", "--json")
    assert r.returncode == 0, str(r)
    data = r.json()
    assert data["ok"] is True
    assert data["mode"] == "commits"
    assert data["component"] == "kernels"
    res = data["result"]
    assert res["first_bad"]["key"] == k[FIRST_BAD] == s.first_bad
    assert res["first_bad"]["subject"] == "kernels: fold the rms epsilon into the scale"
    assert res["last_good"]["key"] == k[FIRST_BAD - 1]
    assert not res["skipped"]
    tested = {st["key"]: st["verdict"] for st in res["steps"]}
    assert set(tested) <= set(k[1:-1])
    assert s.kernels_feature not in tested
    assert all(v == ("bad" if k.index(key) >= FIRST_BAD else "good") for key, v in tested.items())
    assert len(res["steps"]) <= 3  # 7 candidates: log2 steps
    for side, i, distance in (("good", FIRST_BAD - 1, 5), ("bad", FIRST_BAD, 6)):
        lock = read_toml(Path(data["locks"][side]))
        kern = next(c for c in lock["components"] if c["name"] == "kernels")
        assert kern["commit"] == k[i]
        assert_describe(kern["describe"], "v0.1.0", distance, k[i])  # the merged feature commit counts too
        assert kern["wheel"]["file"].startswith(f"realstack_kernels-0.1.1.dev{distance}+g")
        assert_wheels_match(lock, out / side)
    assert (out / "result.json").is_file()
    assert (out / "bisect.log").is_file()


def test_bisect_between_two_locks(realstack_built, kernels_test, tmp_path):
    s = realstack_built.stack
    k = s.kernels_commits
    cli = cli_in(tmp_path / "cwd")
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "good.toml").write_text(
        f'extends = "{s.bisect_recipe}"\n\n[components.kernels]\ncommit = "{k[2]}"\n\n'
        '[components.ark.env]\nARK_SYCL_TARGET = "intel_gpu_bmg_g21"\n')
    (recipes / "bad.toml").write_text(f'extends = "{s.bisect_recipe}"\n')
    for side in ("good", "bad"):
        r = cli("build", "--recipe", recipes / f"{side}.toml", "--cache-dir", realstack_built.cache,
                "--out", tmp_path / f"out-{side}", "--json")
        assert r.returncode == 0, str(r)
    out = tmp_path / "lock-bisect"
    r = cli("bisect", "--good-lock", tmp_path / "out-good" / "stack.lock.toml", "--bad-lock", tmp_path / "out-bad",
            "--test-cmd", kernels_test, "--cache-dir", realstack_built.cache, "--out", out, "--jobs", "1", "--json")
    assert r.returncode == 0, str(r)
    data = r.json()
    res = data["result"]
    assert data["ok"] is True
    assert data["mode"] == "locks"
    kinds = [(d["kind"], d["path"]) for d in res["differences"]]
    assert ("commit", "components.kernels.commit") in kinds
    assert [p for _, p in kinds].index("components.kernels.commit") < [p for _, p in kinds].index(
        next(p for _, p in kinds if "ARK_SYCL_TARGET" in p))  # in dependency order: kernels before ark
    assert res["culprit"]["kind"] == "commit"
    assert res["culprit"]["path"] == "components.kernels.commit"
    assert res["commits"]["first_bad"]["key"] == k[FIRST_BAD]
    assert res["commits"]["last_good"]["key"] == k[FIRST_BAD - 1]
    bad = read_toml(Path(data["locks"]["bad"]))
    assert next(c for c in bad["components"] if c["name"] == "kernels")["commit"] == k[FIRST_BAD]
    assert_wheels_match(bad, Path(data["locks"]["bad"]).parent)


# ---- the fixture itself: what the builds need ------------------------------------------------------------

def test_the_kernels_build_fails_without_the_prefetched_sources(realstack_built, tmp_path):
    s = realstack_built.stack
    recipe = tmp_path / "recipes" / "nofetch.toml"
    recipe.parent.mkdir()
    recipe.write_text(f'extends = "{s.bisect_recipe}"\n\n[components.kernels]\nfetchcontent = []\n')
    cli = cli_in(tmp_path / "cwd")
    r = cli("build", "--recipe", recipe, "--cache-dir", realstack_built.cache, "--out", tmp_path / "out", "--json")
    assert r.returncode == 1, str(r)
    err = r.json()["error"]
    assert f"building kernels@{s.kernels_commit[:12]} failed" in err
    assert "FetchContent: ONEDNN is not pre-fetched" in err


def test_a_pin_missing_in_the_last_component_stops_the_stack_before_anything_compiles(realstack_built, tmp_path):
    """The user's override (extends the base stack from another directory, its own ARK patch) pins ARK, the
    last component, at a commit its repository lacks. In a fresh cache the build fetches every component's
    mirror and the kernels' FetchContent sources first, then stops on that pin: nothing compiled, not even
    the engine built before it, and no lock."""
    s = realstack_built.stack
    missing = "0" * 40
    recipe = s.user_recipe("child-bad-pin")
    recipe.write_text(f'extends = "child"\n\n[components.ark]\ncommit = "{missing}"\n')
    cache, out = tmp_path / "fresh-cache", tmp_path / "out"
    cli = cli_in(tmp_path / "cwd")
    try:
        r = cli("build", "--recipe", recipe, "--cache-dir", cache, "--out", out, "--json")
    finally:
        recipe.unlink()
    assert r.returncode == 2, str(r)
    assert f"child-bad-pin.toml: components.ark.commit: commit {missing} is not in {s.suite.url}" in r.json()["error"]
    assert not list(cache.rglob("entry.json"))
    assert not (out / "stack.lock.toml").exists()
    assert not any((out / "logs" / f"{name}.log").exists() for name in ("engine", "kernels", "ark"))
    mirrors = Mirrors(cache)
    for repo, commit in ((s.engine, s.engine_commit), (s.kernels, s.kernels_commit), (s.onednn, s.onednn_commit),
                         (s.cutlass, s.cutlass_commit), (s.suite, s.ark_commit)):
        assert mirrors.has_commit(repo.url, commit), repo.url  # fetched all the same


def test_the_users_stack_compiled_side_by_side_and_one_at_a_time_gives_the_same_bytes_and_reuses_its_trees(
        realstack_built, tmp_path):
    """The user's override (extends the base stack from another directory, its own ARK patch; the engine's
    patch, the kernels' FetchContent sources, ARK in a subdirectory, versions from `git describe`) built in
    two fresh caches, compiles side by side and `--builds-at-once 1`: the same wheels. Built again with
    --no-cache, every prepared tree (patched, FetchContent, subdirectory) is reused, not prepared again, and
    gives the same wheels once more."""
    s = realstack_built.stack
    cli = cli_in(tmp_path / "cwd")
    locks = {}
    for how, extra in (("at-once", ()), ("one", ("--builds-at-once", "1"))):
        r = cli("build", "--recipe", s.user_recipe("child"), "--cache-dir", tmp_path / f"cache-{how}",
                "--out", tmp_path / f"out-{how}", "--json", *extra)
        assert r.returncode == 0, str(r)
        locks[how] = read_toml(tmp_path / f"out-{how}" / "stack.lock.toml")
    wheels = {how: [(c["name"], c["describe"], c["wheel"]) for c in lock["components"]] for how, lock in locks.items()}
    assert wheels["at-once"] == wheels["one"]
    assert [c["name"] for c in locks["at-once"]["components"]] == ORDER
    trees = [t for t in (tmp_path / "cache-at-once" / "trees").iterdir() if t.is_dir() and not t.name.startswith(".")]
    assert len(trees) == 5  # engine, kernels, its two FetchContent sources, the suite (ARK's subdirectory)
    for tree in trees:
        (tree / ".git" / "marker").write_text("")
    r = cli("build", "--recipe", s.user_recipe("child"), "--cache-dir", tmp_path / "cache-at-once",
            "--out", tmp_path / "out-again", "--json", "--no-cache")
    assert r.returncode == 0, str(r)
    again = read_toml(tmp_path / "out-again" / "stack.lock.toml")
    assert [(c["name"], c["describe"], c["wheel"]) for c in again["components"]] == wheels["at-once"]
    assert all((tree / ".git" / "marker").exists() for tree in trees)  # reused, none prepared again


def test_the_engine_version_override_env_sets_the_wheel_version(realstack_built, tmp_path):
    s = realstack_built.stack
    recipe = tmp_path / "recipes" / "pinned-version.toml"
    recipe.parent.mkdir()
    recipe.write_text(f'extends = "{s.bisect_recipe}"\n\n[components.engine]\nversion = "0.33.0"\n')
    cli = cli_in(tmp_path / "cwd")
    r = cli("build", "--recipe", recipe, "--cache-dir", realstack_built.cache, "--out", tmp_path / "out", "--json")
    assert r.returncode == 0, str(r)
    engine = next(c for c in read_toml(tmp_path / "out" / "stack.lock.toml")["components"] if c["name"] == "engine")
    assert engine["env"]["REALSTACK_ENGINE_VERSION_OVERRIDE"] == "0.33.0"
    assert engine["wheel"]["file"] == "realstack_engine-0.33.0+xpu-py3-none-any.whl"
    assert_describe(engine["describe"], *DESCRIBE["engine"], s.engine_commit)  # the lock still says where from
