"""The lock is the environment (issue 13): the runtime closure of the built wheels resolved by uv, pinned with
the sha256 of each exact file in both locks; installs take exactly those files (hashes required, no index);
the ABI check compares the stand-in torch the kernels were built against with the closure's.

Everything is real and offline: the demo's built wheels, a find-links folder or a PEP 503 index served by
`python -m http.server` on 127.0.0.1 holding wheels the fixtures build, fresh venvs, pip; one test resolves
against the real configured package index and skips, saying why, when it cannot be reached."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

import pytest

from tests.spine_helpers import Cli, isolated_env
from tests.support.closure import (
    REPO,
    WHEELHOUSE,
    build_standin_torch,
    dead_proxy_env,
    demo_variant,
    free_port,
    served,
    simple_index,
    wheelhouse,
)
from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixtures)
from tests.support.debian_image import containers_env
from toolchain.core import toml as tomlio
from toolchain.core.fs import sha256_file
from toolchain.errors import TestFailed
from toolchain.lock import Lock, read_lock
from toolchain.resolve.closure import Closure
from toolchain.smoke import install

pytestmark = pytest.mark.slow
DEPS = {"packaging", "tomli", "standin-torch"}


def closure_of(lock: Lock) -> Closure:
    """The lock's resolved closure (every build here resolves one)."""
    assert lock.closure is not None, f"{lock.path} has no closure"
    return lock.closure


@pytest.fixture(scope="module")
def warm(demo_build, tmp_path_factory):
    """A copy of the demo build's cache (every component cached) and a CLI to build recipe variants with it."""
    root = tmp_path_factory.mktemp("closure")
    shutil.copytree(demo_build.cache, root / "cache", symlinks=True)
    cli = Cli(root, isolated_env(root))

    def build(recipe: Path, out: str, *args) -> tuple:
        r = cli("build", "--recipe", recipe, "--patches-dir", REPO / "patches", "--cache-dir", root / "cache",
                "--out", root / out, "--json", *args)
        return r, root / out

    return root, cli, build


def _copy_out(demo_build, dest: Path) -> Path:
    shutil.copytree(demo_build.out, dest)
    return dest / "stack.lock.toml"


def test_the_closure_and_its_hashes_are_in_both_locks(demo_build):
    lock = read_lock(demo_build.lock_path)
    assert lock.closure is not None
    shipped = {p.name: sha256_file(p) for p in WHEELHOUSE.glob("*.whl")}
    deps = {d.name: d for d in lock.closure.dists}
    assert set(deps) == DEPS
    for d in deps.values():
        assert d.sha256 == shipped[d.file]
        assert d.url.startswith("file://")
        assert d.url.endswith(d.file)
    assert deps["standin-torch"].version == "2.14.0+xpu"
    assert deps["standin-torch"].required_by == ("demo-kernels",)
    assert deps["packaging"].required_by == ("demo-engine",)
    assert deps["packaging"].index == "{demo}/wheelhouse"
    assert lock.closure.indexes == ()
    assert lock.closure.find_links == ("{demo}/wheelhouse",)
    assert lock.closure.resolver.startswith("uv ")
    kernels = lock.component("kernels")
    assert [(b.name, b.version) for b in kernels.built_against] == [("standin-torch", "2.14.0+xpu")]
    # stack.lock.toml as text, and PEP 751 pylock.toml: every dependency file with its sha256
    raw = tomlio.load_file(demo_build.lock_path)
    assert {d["name"]: d["sha256"] for d in raw["dependencies"]} == {n: d.sha256 for n, d in deps.items()}
    pylock = tomlio.load_file(demo_build.out / "pylock.toml")
    packages = {p["name"]: p for p in pylock["packages"]}
    for name, d in deps.items():
        (wheel,) = packages[name]["wheels"]
        assert wheel["hashes"]["sha256"] == d.sha256
        assert wheel["url"] == d.url
        assert packages[name]["tool"]["toolchain"]["role"] == "dependency"
    assert packages["demo-engine"]["tool"]["toolchain"]["role"] == "built"
    assert {x["name"] for x in packages["demo-engine"]["dependencies"]} == {"packaging", "tomli"}
    # --json shows the same
    data = demo_build.result.json()
    assert data["resolved"] is True
    assert {d["name"] for d in data["dependencies"]} == DEPS


def test_smoke_install_takes_exactly_the_lock_with_no_network(demo_build, tmp_path, monkeypatch):
    lock = read_lock(_copy_out(demo_build, tmp_path / "out"))
    for k, v in dead_proxy_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    log = tmp_path / "install.log"
    env = install.create_venv(sys.executable, tmp_path / "venv", log)
    install.install(lock, env, log)
    report = install.environment(lock, env, log)
    assert report["resolved"] and report["ok"], report
    rows = {r["name"]: r for r in report["locked"]}
    assert set(rows) == DEPS | {"demo-engine", "demo-kernels", "demo-ark-lib"}
    for r in rows.values():  # pip recorded the sha256 of the very file the lock names
        assert r["state"] == "ok"
        assert r["installed-sha256"] == r["locked-sha256"]
    assert {r["name"] for r in report["other"]} <= {"pip", "setuptools", "wheel"}
    text = log.read_text()
    assert "--require-hashes" in text
    assert "--no-index" in text
    assert "--no-deps" in text
    done = subprocess.run([env.python, "-c", "import demo_engine, demo_kernels, packaging, tomli, standin_torch; "
                                             "print(standin_torch.__version__)"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "2.14.0+xpu", done.stderr


FAULT_SERVER = REPO / "tests" / "smoke" / "fault_server.py"


def _smoke(cli: Cli, lock: Path, out: Path, *args) -> tuple[int, dict]:
    """`toolchain smoke` of a demo lock with the smoke tests' fault server as the server; (exit, report.json)."""
    serve = " ".join(["{python}", str(FAULT_SERVER), "--port", "{port}", "--mode", "healthy",
                      "--served-model-name", "{model}"])
    r = cli("smoke", "--lock", lock, "--out", out, "--port", free_port(), "--skip-device-check", "--cases",
            "models,math", "--ready-timeout", "60", "--serve-cmd", serve, "--json", *args)
    return r.returncode, (json.loads((out / "report.json").read_text()) if (out / "report.json").is_file() else {})


def _unresolved_copy(demo_build, dest: Path) -> Path:
    """The demo's lock as a --no-resolve build (or an older toolchain) writes it: no [resolve], no dependencies."""
    lock_path = _copy_out(demo_build, dest)
    data = tomlio.load_file(lock_path)
    del data["resolve"], data["dependencies"]
    lock_path.write_text(tomlio.dumps(data))
    assert read_lock(lock_path).closure is None
    return lock_path


def test_smoke_refuses_a_lock_without_closure_unless_unlocked_deps_are_allowed(demo_build, tmp_path):
    """The index serves the demo's dependencies, so installing them would work: a lock that does not pin them
    is still an error naming them and `toolchain lock`; --allow-unlocked-deps installs them from the index,
    and the report says the run was unlocked."""
    lock_path = _unresolved_copy(demo_build, tmp_path / "out")
    simple_index(wheelhouse(tmp_path / "wheels"), tmp_path / "index")
    with served(tmp_path / "index") as url:
        env = {k: v for k, v in isolated_env(tmp_path).items() if k != "PIP_NO_INDEX"}
        cli = Cli(tmp_path, env | {"PIP_INDEX_URL": f"{url}/simple"})
        code, report = _smoke(cli, lock_path, tmp_path / "refused")
        assert code == 2, report
        assert "records no resolved closure" in report["error"]
        assert "nothing was downloaded" in report["error"]
        for need in ("packaging", "tomli", "standin-torch"):
            assert need in report["error"]
        log = (tmp_path / "refused" / "install.log").read_text()
        assert "--no-index --no-deps --require-hashes" in log
        assert "/simple" not in log
        assert not (tmp_path / "refused" / "smoke").exists()  # nothing was served
        code, report = _smoke(cli, lock_path, tmp_path / "unlocked", "--allow-unlocked-deps")
    assert code == 0, report
    inst = report["install"]
    assert inst["unlocked"] is True
    assert inst["environment"]["resolved"] is False
    other = {r["name"]: r for r in inst["environment"]["other"]}
    assert {"packaging", "tomli"} <= set(other)
    assert other["packaging"]["state"] == "not in lock"
    assert "**Unlocked:**" in (tmp_path / "unlocked" / "summary.md").read_text()


def test_the_installed_environment_against_the_lock_flags_a_different_file(demo_build, tmp_path):
    """The environment report (pip freeze-like, with each file's sha256) names a dependency that is not the
    locked file; smoke --no-install from that environment stops before serving."""
    lock_path = _copy_out(demo_build, tmp_path / "out")
    lock = read_lock(lock_path)
    log = tmp_path / "install.log"
    env = install.create_venv(sys.executable, tmp_path / "venv", log)
    install.install(lock, env, log)
    other = build_standin_torch("2.14.0+xpu", tmp_path / "rebuilt-torch")  # same version, another file
    locked_torch = closure_of(lock).dist("standin-torch")
    assert locked_torch is not None
    assert sha256_file(other) != locked_torch.sha256
    subprocess.run([env.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--force-reinstall",
                    str(other)], check=True, timeout=300)
    report = install.environment(lock, env, log)
    rows = {r["name"]: r for r in report["locked"]}
    assert not report["ok"]
    assert rows["standin-torch"]["state"] == "differs"
    assert rows["standin-torch"]["installed-sha256"] == sha256_file(other)
    assert all(r["state"] == "ok" for n, r in rows.items() if n != "standin-torch")
    with pytest.raises(TestFailed) as err:
        install.require_environment(report, env.python, installed_here=False)
    assert "standin-torch: differs" in str(err.value)
    assert sha256_file(other) in str(err.value)
    cli = Cli(tmp_path, isolated_env(tmp_path))
    code, rep = _smoke(cli, lock_path, tmp_path / "smoke", "--no-install", "--python", env.python)
    assert code == 1 and "standin-torch: differs" in rep["error"], rep
    assert "| standin-torch | dependency | 2.14.0+xpu |" in (tmp_path / "smoke" / "summary.md").read_text()
    assert not (tmp_path / "smoke" / "smoke").exists()


def test_verify_repro_installs_the_rebuild_with_the_locks_closure(demo_build, warm, tmp_path):
    """verify-repro --lock: the rebuilt wheels and the published closure install together into a fresh venv,
    hashes required and no index (the rebuild resolves nothing); a dependency the lock does not pin fails."""
    root, cli, _build = warm
    lock_path = _copy_out(demo_build, tmp_path / "out")
    env = dead_proxy_env()

    def verify(work: str):
        return cli("verify-repro", "--lock", lock_path, "--cache-dir", root / "cache", "--patches-dir",
                   REPO / "patches", "--work-dir", tmp_path / work, "--no-diffoscope", "--keep", "--json", env=env)

    r = verify("ok")
    assert r.returncode == 0, str(r)
    data = r.json()
    inst = data["install"]
    assert data["reproducible"] is True
    assert inst["ok"] is True
    assert inst["dependencies"] == len(DEPS)
    assert str(lock_path) in inst["closure"]
    assert inst["files"] == len(DEPS) + 3
    locked = {d.name: d.sha256 for d in closure_of(read_lock(lock_path)).dists}
    installed = {x["name"]: x for x in inst["installed"]}
    assert {n: installed[n]["installed-sha256"] for n in DEPS} == locked
    log = Path(inst["log"]).read_text()
    assert "--no-index --no-deps --require-hashes" in log
    assert "pip check" in log
    assert not (tmp_path / "ok" / "rebuild" / "out" / "logs" / "resolve.log").exists()  # nothing re-resolved
    data = tomlio.load_file(lock_path)
    data["dependencies"] = [d for d in data["dependencies"] if d["name"] != "tomli"]
    lock_path.write_text(tomlio.dumps(data))
    r = verify("missing")
    assert r.returncode == 1, str(r)
    inst = r.json()["install"]
    assert inst["ok"] is False
    assert "tomli" in inst["error"]
    assert "does not pin" in inst["error"]
    assert r.json()["reproducible"] is True  # the wheels are the same: the closure is what fails


def test_a_tampered_dependency_wheel_is_refused(warm, tmp_path):
    _root, _cli, build = warm
    links = wheelhouse(tmp_path / "links")
    recipe = demo_variant(tmp_path / "recipes", "tamper", {"indexes": [], "find-links": [str(links)]})
    r, out = build(recipe, "out-tamper")
    assert r.returncode == 0, str(r)
    lock = read_lock(out)
    assert {d.local_path() for d in closure_of(lock).dists} == {str(links / d.file) for d in closure_of(lock).dists}
    victim = next(links.glob("tomli-*.whl"))
    victim.write_bytes(victim.read_bytes() + b"tampered")
    env = install.create_venv(sys.executable, tmp_path / "venv", tmp_path / "install.log")
    with pytest.raises(TestFailed) as err:
        install.install(lock, env, tmp_path / "install.log")
    assert "sha256" in str(err.value).lower() or "hash" in str(err.value).lower()
    versions = install.installed_versions(env, ["tomli", "demo-engine"])
    assert versions == {"tomli": None, "demo-engine": None}  # nothing was installed


def test_an_index_serving_another_torch_build_fails_the_abi_check(warm, tmp_path):
    _root, _cli, build = warm
    wheels = wheelhouse(tmp_path / "wheels", torch="2.14.0+cpu")
    simple_index(wheels, tmp_path / "index")
    with served(tmp_path / "index") as url:
        recipe = demo_variant(tmp_path / "recipes", "cpu-torch", {"indexes": [f"{url}/simple"]})
        r, out = build(recipe, "out-cpu")
    assert r.returncode == 1, str(r)
    err = r.json()
    assert err["kind"] == "ABIMismatch"
    assert "standin-torch 2.14.0+xpu" in err["error"]
    assert "standin-torch 2.14.0+cpu" in err["error"]
    assert "kernels" in err["error"]
    assert "index" in err["hint"]
    assert not (out / "stack.lock.toml").exists()  # no lock that cannot work


def test_the_same_index_with_the_built_against_torch_resolves_over_http(warm, tmp_path):
    _root, _cli, build = warm
    wheels = wheelhouse(tmp_path / "wheels")
    simple_index(wheels, tmp_path / "index")
    with served(tmp_path / "index") as url:
        recipe = demo_variant(tmp_path / "recipes", "http", {"indexes": [f"{url}/simple"]})
        r, out = build(recipe, "out-http")
    assert r.returncode == 0, str(r)
    lock = read_lock(out)
    for d in closure_of(lock).dists:
        assert d.url == f"{url}/files/{d.file}"
        assert d.index == f"{url}/simple"
        assert d.sha256 == sha256_file(wheels / d.file)


def test_an_unresolvable_requirement_names_it_and_its_component(warm, tmp_path):
    _root, _cli, build = warm
    links = wheelhouse(tmp_path / "links", without=("tomli",))
    recipe = demo_variant(tmp_path / "recipes", "no-tomli", {"indexes": [], "find-links": [str(links)]})
    r, _ = build(recipe, "out-unresolvable")
    assert r.returncode == 1, str(r)
    err = r.json()
    assert err["kind"] == "ResolveError"
    assert "component engine" in err["error"]
    assert "tomli>=2" in err["error"]
    assert "packaging" not in err["error"].split("resolver said")[0]  # only what cannot be satisfied is named


def test_toolchain_lock_re_resolves_and_no_resolve_builds_pin_nothing(demo_build, warm, tmp_path):
    root, cli, build = warm
    lock_path = _copy_out(demo_build, tmp_path / "out")
    before = read_lock(lock_path).closure
    data = tomlio.load_file(lock_path)
    del data["resolve"], data["dependencies"]
    lock_path.write_text(tomlio.dumps(data))
    assert read_lock(lock_path).closure is None
    r = cli("lock", "--lock", lock_path, "--cache-dir", root / "cache", "--patches-dir", REPO / "patches", "--json")
    assert r.returncode == 0, str(r)
    assert read_lock(lock_path).closure == before
    recipe = demo_variant(tmp_path / "recipes", "offline", {"indexes": ["https://unreachable.invalid/simple"]})
    r, out = build(recipe, "out-no-resolve", "--no-resolve")
    assert r.returncode == 0, str(r)
    assert read_lock(out).closure is None
    assert r.json()["resolved"] is False


def _bundle(warm, tmp_path: Path, recipe: Path, tag: str) -> Path:
    _root, _cli, build = warm
    r, _out = build(recipe, f"out-{tag}", "--bundle", "--with-deps")
    assert r.returncode == 0, str(r)
    tarball = Path(r.json()["bundle"] + ".tar.gz")
    dest = tmp_path / f"unpacked-{tag}"
    with tarfile.open(tarball) as tar:
        tar.extractall(dest)
    (bundle,) = dest.iterdir()
    return bundle


def test_bundle_with_deps_installs_air_gapped_in_a_fresh_venv(demo_build, warm, tmp_path):
    links = wheelhouse(tmp_path / "links")
    recipe = demo_variant(tmp_path / "recipes", "gapped", {"indexes": [], "find-links": [str(links)]})
    bundle = _bundle(warm, tmp_path, recipe, "gapped")
    shutil.rmtree(links)  # the index is gone: the tarball alone must do
    assert sorted(p.name for p in (bundle / "wheels" / "deps").iterdir()) == sorted(
        p.name for p in WHEELHOUSE.glob("*.whl"))
    assert "--require-hashes" in (bundle / "INSTALL.txt").read_text()
    pylock = tomlio.load_file(bundle / "pylock.toml")
    paths = {w["path"] for p in pylock["packages"] for w in p.get("wheels", [])}
    assert {f"wheels/deps/{p.name}" for p in WHEELHOUSE.glob("*.whl")} <= paths
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=300)
    py = str(tmp_path / "venv" / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | dead_proxy_env()
    r = subprocess.run([py, "-m", "pip", "install", "--isolated", "--no-index", "--no-deps", "--require-hashes",
                        "-r", "requirements.lock.txt"], cwd=bundle, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([py, "-m", "pip", "check"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    # a tampered file in the bundle is refused by the same command
    victim = next((bundle / "wheels" / "deps").glob("packaging-*.whl"))
    victim.write_bytes(victim.read_bytes()[:-10])
    r = subprocess.run([py, "-m", "pip", "install", "--isolated", "--no-index", "--no-deps", "--require-hashes",
                        "--force-reinstall", "-r", "requirements.lock.txt"], cwd=bundle, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    assert "HASHES" in r.stdout + r.stderr


@pytest.mark.container
def test_bundle_with_deps_installs_in_the_podman_test_image(warm, tmp_path, podman_image):  # noqa: F811  (the imported fixture)
    recipe = demo_variant(tmp_path / "recipes", "in-podman", {"indexes": [], "find-links": ["{demo}/wheelhouse"]},
                          target={"runtime": "podman", "image": podman_image, "python": "python3"})
    bundle = _bundle(warm, tmp_path, recipe, "podman")
    script = ("set -e; python3 -m venv /tmp/v; cd /bundle; "
              "/tmp/v/bin/pip install --isolated --no-index --no-deps --require-hashes -r requirements.lock.txt; "
              "/tmp/v/bin/pip check; /tmp/v/bin/python -c 'import demo_engine, demo_kernels, tomli, standin_torch'")
    r = subprocess.run(["podman", "run", "--rm", "--network=none", "-v", f"{bundle}:/bundle:ro", podman_image,
                        "sh", "-c", script], env=containers_env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr


def _configured_index() -> str:
    done = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True,
                          text=True, timeout=60)
    return os.environ.get("PIP_INDEX_URL") or (done.stdout.strip() if done.returncode == 0 else "") \
        or "https://pypi.org/simple"


def test_resolves_against_the_real_configured_index(warm, tmp_path):
    index = _configured_index().rstrip("/")
    try:
        urllib.request.urlopen(f"{index}/packaging/", timeout=10).close()
    except OSError as exc:
        pytest.skip(f"the configured package index {index} is not reachable: {exc}")
    _root, _cli, build = warm
    links = tmp_path / "torch-only"
    links.mkdir()
    torch = next(WHEELHOUSE.glob("standin_torch-*.whl"))
    shutil.copyfile(torch, links / torch.name)  # the stand-in torch is on no public index
    recipe = demo_variant(tmp_path / "recipes", "real-index", {"indexes": [index], "find-links": [str(links)]})
    r, out = build(recipe, "out-real")
    assert r.returncode == 0, str(r)
    deps = {d.name: d for d in closure_of(read_lock(out)).dists}
    assert set(deps) == DEPS
    for name in ("packaging", "tomli"):
        assert deps[name].url.startswith(("https://", "http://"))
        assert len(deps[name].sha256) == 64
        assert deps[name].index == index
    print(json.dumps({n: (d.version, d.url) for n, d in deps.items()}, indent=1))
