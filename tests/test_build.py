"""Builds: the demo end to end, the wheel cache (hit, miss, concurrency, kill -9), the toolchain environment,
`--from-lock`, and one fixture project per failure mode (tests/packages/)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import tomlkit

from tests.spine_helpers import (
    STANDIN,
    STANDIN_SETVARS,
    TINY_INIT,
    component,
    counted,
    kill_group,
    lock_and_record,
    recipe_data,
    wheel_member,
)
from toolchain.core.fs import sha256_file

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def build_info(out: Path, wheel_glob: str = "tiny-*.whl") -> dict:
    return json.loads(wheel_member(out, "tiny/_build_info.json", wheel_glob))


def entry_dir(cache: Path, key: str) -> Path:
    return cache / "wheels" / key[:2] / key


def assert_cache_sound(cache: Path, *, settled: bool = True) -> None:
    """Every published entry is whole (its wheel hashes as recorded); once a build has finished (`settled`),
    nothing temporary is left in the wheel cache either (right after a kill -9 there may be, unused)."""
    wheels = cache / "wheels"
    for meta in wheels.rglob("entry.json"):
        data = json.loads(meta.read_text())
        wheel = meta.parent / data["wheel"]
        assert sha256_file(wheel) == data["sha256"] and wheel.stat().st_size == data["size"], meta
        with zipfile.ZipFile(wheel) as z:
            assert z.testzip() is None
    if settled:
        assert not list(wheels.rglob(".tmp-*")), list(wheels.rglob(".tmp-*"))


def assert_no_leftovers(cache: Path) -> None:
    """Nothing a killed builder left behind survives the next build of the same key."""
    assert_cache_sound(cache)
    leftovers = [*cache.glob("work/*"), *cache.glob("trees/.tmp-*"), *cache.glob("git/.tmp-*")]
    assert not leftovers, leftovers


# ---- the demo, end to end ----------------------------------------------------------------------------

def test_demo_lock_records_everything(demo_build):
    facts = demo_build.lock()  # what was built; this machine's paths as the tool finds them anywhere
    assert facts["toolchain"]["setvars"] == "{demo}/oneapi-standin/setvars.sh"
    assert facts["toolchain"]["cmplr-root"] == "{demo}/oneapi-standin"
    assert not {"build-seconds", "jobs", "metrics", "compiler-cache"} & {k for c in facts["components"] for k in c}
    assert "host" not in facts and "resolved-at" not in facts.get("resolve", {})
    lock = lock_and_record(demo_build.out)  # with what the build measured and where this machine keeps things
    assert lock["lock-version"] == 1
    assert lock["tool-version"]
    recipe_path = Path(lock["recipe"]["path"])
    assert recipe_path.name == "demo.toml"
    assert lock["recipe"]["name"] == "demo"
    assert lock["recipe"]["sha256"] == __import__("hashlib").sha256(lock["recipe"]["text"].encode()).hexdigest()
    assert "demo = true" in lock["recipe"]["text"]
    tc = lock["toolchain"]
    assert tc["oneapi-version"] == "2025.2.0"
    assert tc["cmplr-root"] == str(STANDIN)
    assert tc["setvars"] == str(STANDIN_SETVARS)
    assert tc["setvars-args"] == ["--force"]
    assert HEX64.match(tc["env-diff-sha256"])
    target = lock["target"]
    assert target["runtime"] == "host"
    assert target["python"] == "python3"
    assert target["python-version"]
    assert target["pip-version"]
    assert target["python-tag"].startswith("cp")
    assert lock["smoke"]["model"] == "SmolLM2-135M-Instruct"
    assert lock["smoke"]["device"] == "b70"
    comps = {c["name"]: c for c in lock["components"]}
    assert [c["name"] for c in lock["components"]] == ["engine", "kernels", "ark"]  # install order
    assert comps["engine"]["describe"] == "v0.3.0-0-g4545736bd5a8"  # 12 hex: DESCRIBE_RULE
    assert comps["engine"]["patches"] == [{"path": "demo/0001-engine-reject-empty-prompt.patch", "sha256": sha256_file(
        recipe_path.parent.parent / "patches" / "demo" / "0001-engine-reject-empty-prompt.patch")}]
    assert comps["ark"]["subdir"] == "extension/ark"
    assert comps["ark"]["after"] == ["kernels"]
    assert comps["ark"]["env"] == {"BUILD_MODE": "release", "DEMO_ARK_TARGET": "intel_gpu_bmg_g31"}
    assert comps["ark"]["jobs"] >= 1
    assert comps["ark"]["compiler-cache"]["launcher"] == "ccache"
    assert comps["kernels"]["fetchcontent"][0]["name"] == "demoheaders"
    for c in lock["components"]:
        assert re.match(r"^[0-9a-f]{40}$", c["commit"])
        assert c["url"].startswith("https://demo.invalid/")
        assert c["command"][:3] == ["{python}", "-m", "pip"]
        assert c["cache-key"]
        assert c["build-seconds"] > 0
        wheel = demo_build.out / "wheels" / c["wheel"]["file"]
        assert sha256_file(wheel) == c["wheel"]["sha256"]
        assert wheel.stat().st_size == c["wheel"]["size"]
    # (wheels/deps/ is where a smoke of this lock, by tests sharing the fixture, fetches the locked closure)
    assert sorted(p.name for p in (demo_build.out / "wheels").iterdir() if p.name != "deps") == sorted(
        c["wheel"]["file"] for c in lock["components"])
    pylock = tomlkit.parse((demo_build.out / "pylock.toml").read_text()).unwrap()
    assert pylock["lock-version"] == "1.0"
    built = [p for p in pylock["packages"] if p["tool"]["toolchain"]["role"] == "built"]  # then the dependencies
    assert [(p["name"], p["wheels"][0]["path"], p["wheels"][0]["hashes"]["sha256"]) for p in built] == [
        (c["dist"], f"wheels/{c['wheel']['file']}", c["wheel"]["sha256"]) for c in lock["components"]]
    data = demo_build.result.json()
    assert data["ok"] is True
    assert data["lock"] == str(demo_build.lock_path)
    assert [c["sha256"] for c in data["components"]] == [c["wheel"]["sha256"] for c in lock["components"]]


def test_demo_wheels_install_into_a_plain_venv_and_work(demo_build, tmp_path):
    venv = tmp_path / "venv"
    # a plain venv (no system site-packages); pip runs from outside it (`--python`), so no ensurepip needed
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=180)
    py = str(venv / "bin" / "python")
    wheels = sorted(str(p) for p in (demo_build.out / "wheels").glob("*.whl"))
    env = dict(demo_build.cli.env, PYTHONPATH="")
    r = subprocess.run([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", *wheels],
                       env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    check = """
import math, demo_engine, demo_kernels, demo_ark
from importlib.metadata import version
assert math.isclose(demo_kernels.rms_norm([3, 4]), math.sqrt(12.5), rel_tol=1e-4), demo_kernels.rms_norm([3, 4])
assert math.isclose(demo_kernels.rms_norm_scaled([3, 4], 2.0), 2 * demo_kernels.rms_norm([3, 4]))
assert demo_kernels.compiler() == "2025.2.0"          # built in the stand-in oneAPI environment
assert demo_engine.generate("hi") == "Hello from the demo engine: hi"
try:
    demo_engine.generate("")
except ValueError:
    pass                                              # the demo patch is applied
else:
    raise AssertionError("the patch is not applied")
assert demo_ark.target() == "intel_gpu_bmg_g31"    # the recipe's DEMO_ARK_TARGET reached the compiler
print(version("demo-engine"), version("demo-kernels"), version("demo-ark-lib"))
"""
    r = subprocess.run([py, "-c", check], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # versions from git describe in the checkout (full history and tags), and BUILD_MODE=release for ARK
    assert r.stdout.split() == ["0.3.0+demo", "0.1.0.post2+gcbeb92f56039", "0.5.0"]  # 12 hex: DESCRIBE_RULE


def test_a_second_demo_build_is_all_cache_hits(demo_build, tmp_path):
    entries = {c["cache-key"]: entry_dir(demo_build.cache, c["cache-key"]) for c in demo_build.lock()["components"]}
    stamps = {k: ((d / "entry.json").read_bytes(), (d / "entry.json").stat().st_mtime_ns) for k, d in entries.items()}
    r = demo_build.cli("build", "--recipe", "demo", "--cache-dir", demo_build.cache, "--out", tmp_path / "again",
                       "--json")
    assert r.returncode == 0, str(r)
    again = tomlkit.parse((tmp_path / "again" / "stack.lock.toml").read_text()).unwrap()
    assert again["components"] == demo_build.lock()["components"]
    for name in ("engine", "kernels", "ark"):
        log = (tmp_path / "again" / "logs" / f"{name}.log").read_text()
        assert "# wheel cache hit:" in log and "copied from the cache" in log, log  # built nothing, and
        assert "pip wheel --no-build-isolation" in log, log                       # kept the build's full log
    assert {k: ((d / "entry.json").read_bytes(), (d / "entry.json").stat().st_mtime_ns)
            for k, d in entries.items()} == stamps


# ---- the wheel cache: hits and misses ----------------------------------------------------------------

def test_cache_hit_builds_nothing_and_every_input_change_misses(ws, make_repo, tmp_path):
    repo = make_repo("tiny", "tiny")
    first = repo.head()
    second = repo.commit("second", {"NEWS": "2\n"})
    counter = tmp_path / "builds"
    env = {"TINY_BUILD_COUNTER": str(counter)}
    one = repo.make_patch({"tiny/__init__.py": TINY_INIT + "\nX = 1\n"})
    ws.patch("tiny/p.patch", one)

    def build(**keys) -> dict:
        setvars = keys.pop("setvars", "")
        ws.recipe("r", recipe_data({"tiny": component(repo, **{"commit": first, "patches": ["tiny/p.patch"],
                                                              **keys})}, setvars=setvars))
        r = ws.build("r", env=env)
        assert r.returncode == 0, str(r)
        return ws.lock()["components"][0]

    base = build()
    assert counted(counter) == 1
    lock_file = ws.root / "out" / "stack.lock.toml"
    lock_stat = lock_file.stat().st_mtime_ns
    assert build() == base
    assert counted(counter) == 1
    assert "# wheel cache hit:" in (ws.root / "out" / "logs" / "tiny.log").read_text()
    assert lock_file.stat().st_mtime_ns == lock_stat  # the same lock is not even rewritten

    keys = {base["cache-key"]}
    ws.patch("tiny/p.patch", one.replace("+X = 1", "+X = 2"))
    changed = [build()]                                            # patch content
    ws.patch("tiny/p.patch", one)
    changed.append(build(env={"TINY_FLAVOR": "spicy"}))            # build env
    changed.append(build(commit=second))                           # commit
    changed.append(build(setvars=str(STANDIN_SETVARS)))            # toolchain
    changed.append(build(version="7.0.0"))                         # version override
    changed.append(build(command=["{python}", "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                                  "-q", "{src}", "-w", "{out}"]))  # command
    for c in changed:
        assert c["cache-key"] not in keys
        keys.add(c["cache-key"])
    assert counted(counter) == 1 + len(changed)
    assert changed[1]["env"]["TINY_FLAVOR"] == "spicy"
    assert changed[4]["wheel"]["file"] == "tiny-7.0.0-py3-none-any.whl"
    assert [p.name for p in (ws.root / "out" / "wheels").iterdir()] == [changed[-1]["wheel"]["file"]]
    assert build() == base
    assert counted(counter) == 1 + len(changed)
    assert_cache_sound(ws.cache)


def test_the_invoking_environment_is_not_part_of_the_key(ws, tiny_repo, tmp_path):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    counter = tmp_path / "builds"
    assert ws.build("r", "a", env={"TINY_BUILD_COUNTER": str(counter), "UNRELATED": "1"}).returncode == 0
    assert ws.build("r", "b", env={"TINY_BUILD_COUNTER": str(counter), "UNRELATED": "2"}).returncode == 0
    assert counted(counter) == 1
    assert ws.lock("a")["components"] == ws.lock("b")["components"]


def test_no_cache_rebuilds_and_gives_the_same_bytes(ws, tiny_repo, tmp_path):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    counter = tmp_path / "builds"
    env = {"TINY_BUILD_COUNTER": str(counter)}
    assert ws.build("r", "a", env=env).returncode == 0
    assert ws.build("r", "b", "--no-cache", "--fresh-sources", env=env).returncode == 0
    assert counted(counter) == 2
    assert ws.lock("a")["components"][0]["wheel"] == ws.lock("b")["components"][0]["wheel"]


# ---- concurrency and kill -9 -------------------------------------------------------------------------

def test_two_concurrent_builders_on_one_cache_build_each_component_once(ws, make_repo, tmp_path):
    a, b = make_repo("a", "tiny"), make_repo("b", "tiny")
    ws.recipe("r", recipe_data({"a": component(a, dist="tiny"),
                                "b": component(b, dist="tiny", version="2.0.0", after=["a"])}))
    counter = tmp_path / "builds"
    env = {"TINY_BUILD_COUNTER": str(counter), "TINY_BUILD_SLEEP": "1"}
    procs = [ws.cli.start("build", "--recipe", "r", "--out", ws.root / out, "--cache-dir", ws.cache, "--json",
                          env=env) for out in ("one", "two")]
    results = [ws.cli.finish(p) for p in procs]
    for r in results:
        assert r.returncode == 0, str(r)
    assert counted(counter) == 2  # a once and b once, not once per builder
    one, two = ws.lock("one")["components"], ws.lock("two")["components"]
    assert [c["wheel"] for c in one] == [c["wheel"] for c in two]
    for c in one:
        assert sha256_file(ws.root / "one" / "wheels" / c["wheel"]["file"]) == \
            sha256_file(ws.root / "two" / "wheels" / c["wheel"]["file"]) == c["wheel"]["sha256"]
    hits = [name for out in ("one", "two") for name in ("a", "b")
            if "# wheel cache hit:" in (ws.root / out / "logs" / f"{name}.log").read_text()]
    assert len(hits) == 2, hits  # each component: built by one builder, taken from the cache by the other
    assert_cache_sound(ws.cache)


def _wait_for(predicate, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the build ended (exit {proc.returncode}) before the test could kill it:\n"
                                 + "".join(proc.communicate()))
        assert time.monotonic() < deadline, "timed out waiting for the build to start"
        time.sleep(0.05)


def test_a_build_killed_with_sigkill_mid_build_leaves_no_bad_entry_and_reruns(ws, tiny_repo, tmp_path):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    counter = tmp_path / "builds"
    proc = ws.cli.start("build", "--recipe", "r", "--out", ws.root / "out", "--cache-dir", ws.cache, "--json",
                        env={"TINY_BUILD_COUNTER": str(counter), "TINY_BUILD_SLEEP": "120"})
    try:
        _wait_for(lambda: counted(counter) == 1, 120, proc)  # inside build_wheel, holding the key's lock
    finally:
        kill_group(proc)
    assert proc.returncode == -9
    assert not list((ws.cache / "wheels").rglob("entry.json"))  # no entry, not even a partial one
    assert not (ws.root / "out" / "stack.lock.toml").exists()

    r = ws.build("r", env={"TINY_BUILD_COUNTER": str(counter)})
    assert r.returncode == 0, str(r)
    assert counted(counter) == 2  # built again: nothing of the killed build was taken for a result
    assert_no_leftovers(ws.cache)
    (c,) = ws.lock()["components"]
    assert c["wheel"]["sha256"] == sha256_file(entry_dir(ws.cache, c["cache-key"]) / c["wheel"]["file"])
    assert build_info(ws.root / "out")  # a complete wheel


def test_builds_killed_at_any_moment_never_leave_a_bad_entry(ws, tiny_repo, tmp_path):
    """Kill -9 at staggered moments (fetching, preparing the tree, building, storing); then a build on the
    same cache gives exactly the wheel of a clean build in a fresh cache."""
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}))
    for delay in (0.15, 0.4, 0.7, 1.0, 1.3):
        proc = ws.cli.start("build", "--recipe", "r", "--out", ws.root / "killed", "--cache-dir", ws.cache, "--json")
        time.sleep(delay)
        kill_group(proc)
        assert_cache_sound(ws.cache, settled=False)
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    clean = ws.build("r", "clean", cache=tmp_path / "fresh-cache")
    assert clean.returncode == 0, str(clean)
    assert ws.lock()["components"][0]["wheel"] == ws.lock("clean")["components"][0]["wheel"]
    assert_cache_sound(ws.cache)
    # a half-made mirror or tree of a killed run is removed by the next run that makes one
    assert not list(ws.cache.glob("git/.tmp-*"))
    assert not list(ws.cache.glob("trees/.tmp-*"))


# ---- the toolchain environment -----------------------------------------------------------------------

def test_the_toolchain_env_is_captured_recorded_and_seen_by_the_build(ws, tiny_repo):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}, setvars=str(STANDIN_SETVARS)))
    plan = ws.cli("plan", "--recipe", "r", "--json")
    assert plan.returncode == 0, str(plan)
    env = plan.json()["toolchain"]["env"]
    assert env["CMPLR_ROOT"] == env["ONEAPI_ROOT"] == str(STANDIN)
    assert env["TOOLCHAIN_ONEAPI_STANDIN"] == "1"
    assert env["SETVARS_COMPLETED"] == "1"
    assert env["PATH"].startswith(f"{STANDIN}/bin:")
    assert "HOME" not in env
    assert "TOOLCHAIN_CACHE_DIR" not in env
    assert plan.json()["toolchain"]["oneapi-version"] == "2025.2.0"
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    tc = lock_and_record(ws.root / "out")["toolchain"]
    assert tc["oneapi-version"] == "2025.2.0"
    assert tc["cmplr-root"] == str(STANDIN)
    assert tc["setvars"] == str(STANDIN_SETVARS)
    assert HEX64.match(tc["env-diff-sha256"])
    seen = build_info(ws.root / "out")["env"]
    assert seen["CMPLR_ROOT"] == str(STANDIN)
    assert seen["TOOLCHAIN_ONEAPI_STANDIN"] == "1"
    # not set by the recipe: the tool sized the jobs and set the job variables (outside the cache key)
    (locked,) = lock_and_record(ws.root / "out")["components"]
    assert seen["MAX_JOBS"] == str(locked["jobs"])
    assert locked["jobs-source"] in ("cores", "memory")
    assert "MAX_JOBS" not in locked["env"]


def test_a_relative_setvars_is_relative_to_the_recipe_file(ws, tiny_repo):
    shutil.copytree(STANDIN, ws.root / "oneapi")
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}, setvars="../oneapi/setvars.sh"))
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    assert ws.lock()["toolchain"]["cmplr-root"] == str(ws.root / "oneapi")


def test_a_missing_setvars_names_the_key_and_writes_no_output(ws, tiny_repo):
    missing = ws.root / "intel" / "oneapi" / "setvars.sh"
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}, setvars=str(missing)))
    r = ws.cli("build", "--recipe", "r", "--json")
    assert r.returncode == 2, str(r)
    assert f"r.toml: toolchain.setvars: {missing} does not exist in the host" in r.json()["error"]
    assert "set [toolchain] setvars" in r.json()["hint"]
    assert 'setvars = ""' in r.json()["hint"]
    assert "set [toolchain] setvars" in r.stderr  # not eaten as console markup
    assert not (ws.root / "dist").exists()
    plan = ws.cli("plan", "--recipe", "r", "--json")  # plan builds nothing: it shows why, and the rest
    assert plan.returncode == 0, str(plan)
    assert plan.json()["toolchain"]["status"] == \
        f"not captured: r.toml: toolchain.setvars: {missing} does not exist in the host"


def test_setvars_args_force_resources_over_an_already_sourced_shell(ws, tiny_repo):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}, setvars=str(STANDIN_SETVARS),
                               toolchain={"setvars": str(STANDIN_SETVARS), "setvars-args": []}))
    already = {"SETVARS_COMPLETED": "1"}  # a shell where setvars.sh ran (its PATH and CMPLR_ROOT since lost)
    r = ws.build("r", env=already)
    assert r.returncode == 1, str(r)  # the script skipped itself: no compiler
    assert "gave no compiler" in r.json()["error"]
    assert "CMPLR_ROOT is unset" in r.json()["error"]
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}, setvars=str(STANDIN_SETVARS)))  # ["--force"]
    r = ws.build("r", env=already)
    assert r.returncode == 0, str(r)
    assert ws.lock()["toolchain"]["oneapi-version"] == "2025.2.0"
    assert build_info(ws.root / "out")["env"]["CMPLR_ROOT"] == str(STANDIN)


def test_a_failing_setvars_is_a_build_error_with_its_output(ws, tiny_repo):
    script = ws.root / "setvars.sh"
    script.write_text('echo "oneAPI: the compiler component is broken" >&2\nreturn 3\n')
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}, setvars=str(script)))
    r = ws.build("r")
    assert r.returncode == 1, str(r)
    err = r.json()["error"]
    assert f"sourcing {script} --force failed (exit 3)" in err
    assert "the compiler component is broken" in err


# ---- --from-lock ---------------------------------------------------------------------------------------

def test_from_lock_rebuilds_exactly_the_recorded_wheels(ws, make_repo, tmp_path):
    repo = make_repo("tiny", "tiny")
    ws.patch("tiny/p.patch", repo.make_patch({"tiny/__init__.py": TINY_INIT + "\nFROM_LOCK = 1\n"}))
    ws.recipe("r", recipe_data({"tiny": component(repo, patches=["tiny/p.patch"])}, setvars=str(STANDIN_SETVARS)))
    assert ws.build("r").returncode == 0
    ws.recipe("r", recipe_data({"tiny": component(repo)}))  # the recipe moves on; the lock does not
    r = ws.cli("build", "--from-lock", ws.root / "out" / "stack.lock.toml", "--out", ws.root / "again",
               "--cache-dir", tmp_path / "fresh-cache", "--json")
    assert r.returncode == 0, str(r)
    old, new = ws.lock("out"), ws.lock("again")
    assert new["recipe"] == old["recipe"]
    assert new["components"][0]["cache-key"] == old["components"][0]["cache-key"]
    assert new["components"][0]["wheel"] == old["components"][0]["wheel"]  # rebuilt from scratch, same bytes
    assert "FROM_LOCK = 1" in wheel_member(ws.root / "again", "tiny/__init__.py")


def test_from_lock_refuses_a_tampered_wheel(demo_build, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(demo_build.out, out)
    lock = demo_build.lock()
    victim = out / "wheels" / lock["components"][1]["wheel"]["file"]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size: only the sha256 tells
    victim.write_bytes(bytes(data))
    r = demo_build.cli("build", "--from-lock", out / "stack.lock.toml", "--out", tmp_path / "rebuilt",
                       "--cache-dir", demo_build.cache, "--json")
    assert r.returncode == 2, str(r)  # the lock's parts disagree: bad input, refused before building
    err = r.json()["error"]
    assert f"kernels: {victim.name} has sha256 {sha256_file(victim)}, the lock records" in err
    assert lock["components"][0]["wheel"]["file"] not in err  # only the tampered one is named
    assert not (tmp_path / "rebuilt").exists()


def test_from_lock_refuses_a_tampered_patch_or_recipe(ws, make_repo):
    repo = make_repo("tiny", "tiny")
    patch = ws.patch("tiny/p.patch", repo.make_patch({"tiny/__init__.py": TINY_INIT + "\nP = 1\n"}))
    ws.recipe("r", recipe_data({"tiny": component(repo, patches=["tiny/p.patch"])}))
    assert ws.build("r").returncode == 0
    lock_path = ws.root / "out" / "stack.lock.toml"
    recorded = sha256_file(patch)
    patch.write_text(patch.read_text().replace("+P = 1", "+P = 2"))
    r = ws.cli("build", "--from-lock", lock_path, "--out", ws.root / "again", "--json")
    assert r.returncode == 2, str(r)
    assert f"tiny: patch tiny/p.patch has sha256 {sha256_file(patch)}, the lock records {recorded}" \
        in r.json()["error"]
    assert not (ws.root / "again").exists()

    patch.write_text(patch.read_text().replace("+P = 2", "+P = 1"))
    lock_path.write_text(lock_path.read_text().replace('description = \\"test recipe\\"',
                                                       'description = \\"edited\\"'))
    r = ws.cli("build", "--from-lock", lock_path, "--out", ws.root / "again", "--json")
    assert r.returncode == 2, str(r)
    assert "recipe text has sha256" in r.json()["error"]


# ---- one fixture project per failure mode ------------------------------------------------------------

def test_a_failing_build_shows_command_log_and_tail_and_stores_nothing(ws, make_repo):
    repo = make_repo("fails", "fails")
    ws.recipe("r", recipe_data({"fails": component(repo)}))
    r = ws.build("r")
    assert r.returncode == 1, str(r)
    err = r.json()["error"]
    log = ws.root / "out" / "logs" / "fails.log"
    assert f"building fails@{repo.head()[:12]} failed (exit 1)" in err
    assert "-m pip wheel --no-build-isolation --no-deps" in err  # the recipe's command, made as pip's backend call
    assert "(the PEP 517 backend tiny_backend called directly, as pip would call it" in err
    assert f"log: {log}" in err
    assert "RuntimeError: TINY-BUILD-FAILS: the compiler exploded" in err  # the tail: the backend's traceback
    assert "TINY-BUILD-FAILS: the compiler exploded" in log.read_text()
    assert "# toolchain: the command as pip runs it" in log.read_text()
    assert "read the log" in r.json()["hint"]
    assert not list((ws.cache / "wheels").rglob("entry.json"))
    assert not (ws.root / "out" / "stack.lock.toml").exists()


def test_a_build_that_writes_two_wheels_is_refused(ws, make_repo):
    repo = make_repo("twowheels", "twowheels")
    command = ["{python}", "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "{src}", "{src}/second",
               "-w", "{out}"]
    ws.recipe("r", recipe_data({"twowheels": component(repo, command=command)}))
    r = ws.build("r")
    assert r.returncode == 1, str(r)
    err = r.json()["error"]
    assert "building twowheels produced 2 wheels" in err
    assert "expected exactly one" in err
    assert "twowheels-1.0.0-py3-none-any.whl" in err
    assert "twowheels_second-1.0.0-py3-none-any.whl" in err
    assert not list((ws.cache / "wheels").rglob("entry.json"))


def test_a_missing_build_requirement_is_named_before_building(ws, make_repo, tmp_path):
    repo = make_repo("missing-req", "missing-req")
    counter = tmp_path / "builds"
    ws.recipe("r", recipe_data({"missing-req": component(repo)}))
    r = ws.build("r", env={"TINY_BUILD_COUNTER": str(counter)})
    assert r.returncode == 1, str(r)
    err = r.json()["error"]
    assert f"missing-req@{repo.head()[:12]}: build requirements missing in the target interpreter" in err
    assert "tiny-missing-build-dependency>=1.0" in err
    assert f"{sys.executable} -m pip install 'tiny-missing-build-dependency>=1.0'" in r.json()["hint"]  # pastes
    assert counted(counter) == 0  # pip was not even started


def test_a_wheel_with_another_distribution_name_is_refused_unless_the_recipe_says_so(ws, make_repo):
    repo = make_repo("distname", "distname")
    ws.recipe("r", recipe_data({"distname": component(repo)}))
    r = ws.build("r")
    assert r.returncode == 1, str(r)
    assert ("distname: the wheel is other_name-1.0.0-py3-none-any.whl (distribution other-name), "
            "but the recipe says dist = 'distname'") in r.json()["error"]
    ws.recipe("r", recipe_data({"distname": component(repo, dist="other-name")}))
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    assert ws.lock()["components"][0]["dist"] == "other-name"


def test_fetchcontent_sources_are_prefetched_at_their_commit(ws, make_repo):
    dep = make_repo("dep")
    pinned = dep.commit("the pinned header", {"include/dep.h": "#define DEP 1\n"})
    dep.commit("later", {"include/dep.h": "#define DEP 2\n"})
    app = make_repo("tiny", "tiny")
    ws.recipe("r", recipe_data({"tiny": component(app, fetchcontent=[
        {"name": "oneDNN", "url": dep.url, "commit": pinned},
        {"name": "sycl-tla", "url": dep.url, "commit": dep.head(), "env": "TINY_DEP_DIR"}])}))
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    seen = build_info(ws.root / "out")["env"]
    (arg,) = seen["CMAKE_ARGS"].split()
    name, path = arg.split("=", 1)
    assert name == "-DFETCHCONTENT_SOURCE_DIR_ONEDNN"
    assert Path(path, "include", "dep.h").read_text() == "#define DEP 1\n"
    assert Path(seen["TINY_DEP_DIR"], "include", "dep.h").read_text() == "#define DEP 2\n"
    assert [f["commit"] for f in ws.lock()["components"][0]["fetchcontent"]] == [pinned, dep.head()]


def test_components_build_in_dependency_order(ws, make_repo, tmp_path):
    repos = {n: make_repo(n, "tiny") for n in ("first", "second", "third")}
    counter = tmp_path / "builds"
    ws.recipe("r", recipe_data({
        "third": component(repos["third"], dist="tiny", version="3.0.0", after=["second"]),
        "first": component(repos["first"], dist="tiny", version="1.0.0"),
        "second": component(repos["second"], dist="tiny", version="2.0.0", after=["first"])}))
    r = ws.build("r", env={"TINY_BUILD_COUNTER": str(counter)})
    assert r.returncode == 0, str(r)
    assert [c["name"] for c in ws.lock()["components"]] == ["first", "second", "third"]
    assert [c["name"] for c in r.json()["components"]] == ["first", "second", "third"]
    assert [c["version"] for c in ws.lock()["components"]] == ["1.0.0", "2.0.0", "3.0.0"]
    assert counted(counter) == 3


def test_a_target_python_that_does_not_run_is_bad_input(ws, tiny_repo):
    python = str(ws.root / "no-such-python3")
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}, target={"runtime": "host", "python": python}))
    r = ws.build("r")
    assert r.returncode == 2, str(r)
    assert f"target.python: {python!r} does not run on the host" in r.json()["error"]
    assert "set [target] python" in r.json()["hint"]
    assert not (ws.root / "out").exists()
