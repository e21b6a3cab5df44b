"""A base environment (`[target] base = "image@sha256:..."`): one component rebuilt onto a stack someone else
built, as the B70 report's direct fix does. The base is the Debian test image with a stand-in stack installed
(engine, kernels, an older ARK, the stand-in torch and their dependencies) in /opt/stack: a derived image built
once per session with real podman."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.spine_helpers import Cli, isolated_env
from tests.support.closure import REPO, WHEELHOUSE, demo_variant, free_port
from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixtures)
from tests.support.debian_image import containers_env
from toolchain.core import toml as tomlio
from toolchain.core import trust
from toolchain.resolve.image_closure import overlay_closure
from toolchain.resolve.torch_abi import ABIMismatch
from toolchain.resolve.uvpin import ResolveError
from toolchain.target.baseenv import BaseDist, BaseEnv

STACK_PYTHON = "/opt/stack/bin/python"
FAULTS = Path(__file__).resolve().parent / "smoke"  # the smoke tests' fault server: serves inside the container


def _podman(*args: str, timeout: float = 900) -> str:
    done = subprocess.run(["podman", *args], env=containers_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="session")
def stack_image(podman_image, demo_build, tmp_path_factory) -> str:  # noqa: F811  (the imported fixture)
    """The test image with the demo stack installed into /opt/stack (a venv that sees the image's setuptools):
    `localhost/toolchain-test-stack@sha256:...`, tagged by what it holds, so a rerun reuses it."""
    wheels = sorted([*(demo_build.out / "wheels").glob("*.whl"), *WHEELHOUSE.glob("*.whl")])
    tag = hashlib.sha256("\n".join([podman_image, *(w.name for w in wheels)]).encode()).hexdigest()[:12]
    name = f"localhost/toolchain-test-stack:{tag}"
    have = subprocess.run(["podman", "image", "exists", name], env=containers_env(), timeout=60)
    if have.returncode != 0:
        ctx = tmp_path_factory.mktemp("stack-image")
        (ctx / "wheels").mkdir()
        for w in wheels:
            shutil.copyfile(w, ctx / "wheels" / w.name)
        (ctx / "Containerfile").write_text(
            f"FROM {podman_image}\nCOPY wheels /wheels\n"
            "RUN python3 -m venv --system-site-packages /opt/stack && /opt/stack/bin/python -m pip install -q "
            "--no-index --no-deps /wheels/*.whl && rm -rf /wheels\n")
        _podman("build", "-q", "--network=none", "-t", name, str(ctx))
    digest = _podman("image", "inspect", "--format", "{{.Digest}}", name)
    return f"localhost/toolchain-test-stack@{digest}"


def test_ark_rebuilt_over_a_base_image_is_locked_with_what_the_image_holds(stack_image, tmp_path):
    recipes = tmp_path / "recipes"
    recipe = demo_variant(recipes, "overlay", {"indexes": ["http://127.0.0.1:9/simple"]},  # no index is asked
                          target={"runtime": "podman", "base": stack_image, "python": STACK_PYTHON, "run-args": [
                              "--mount", f"type=bind,source={FAULTS},destination=/toolchain-test/faults,readonly"]})
    data = tomlio.load_file(recipe)
    ark = dict(data["components"]["ark"], **{"built-against": ["standin-torch"]})
    data["components"] = {"ark": {k: v for k, v in ark.items() if k != "after"}}
    recipe.write_text(tomlio.dumps(data))
    env = {**isolated_env(tmp_path), **containers_env()}
    cli = Cli(tmp_path, env)
    r = cli("build", "--recipe", recipe, "--out", tmp_path / "out", "--cache-dir", tmp_path / "cache", "--bundle",
            "--json")
    assert r.returncode == 0, str(r)
    lock = tomlio.load_file(tmp_path / "out" / "stack.lock.toml")
    base = lock["base"]
    assert base["image"] == stack_image
    assert stack_image.endswith(base["digest"])
    held = {d["name"]: d for d in base["dists"]}
    for name in ("demo-engine", "demo-kernels", "demo-ark-lib", "standin-torch", "packaging", "tomli"):
        assert name in held, sorted(held)
    assert len(held["demo-kernels"]["record-sha256"]) == 64
    assert base["python-version"].startswith("3.")
    # rebuilt inside the image, against its torch, and installed over it
    (locked,) = lock["components"]
    assert locked["built-against"] == [{"name": "standin-torch", "version": "2.14.0+xpu", "cxx11-abi": ""}]
    assert {"--force-reinstall", "--no-deps"} <= set(locked["install-args"])
    assert lock["target"]["image-digest"] == base["digest"]
    assert lock["resolve"]["indexes"] == []
    assert lock.get("dependencies", []) == []
    (bundle,) = [p for p in (tmp_path / "out" / "bundles").iterdir() if p.is_dir()]
    install = (bundle / "INSTALL.txt").read_text()
    assert stack_image in install
    assert "--force-reinstall" in install

    # installed over the image: the overlay's ARK replaces the image's, the rest is the image's
    wheel = tmp_path / "out" / "wheels" / locked["wheel"]["file"]
    script = (f"set -e; {STACK_PYTHON} -m pip install -q --no-index --no-deps --force-reinstall /w/{wheel.name}; "
              f"{STACK_PYTHON} -m pip check; {STACK_PYTHON} -c 'import demo_ark, demo_engine, demo_kernels'")
    _podman("run", "--rm", "--network=none", "-v", f"{wheel.parent}:/w:ro", stack_image, "sh", "-c", script)

    # smoke: a container of the base image (the locked digest), the overlay installed over what it holds
    port = free_port()
    r = cli("smoke", "--lock", tmp_path / "out" / "stack.lock.toml", "--out", tmp_path / "smoke", "--port", port,
            "--skip-device-check", "--ready-timeout", "120", "--cases", "models,math", "--json", "--serve-cmd",
            "{python} /toolchain-test/faults/fault_server.py --port {port} --mode healthy --served-model-name {model}")
    assert r.returncode == 0, str(r)
    report = json.loads((tmp_path / "smoke" / "report.json").read_text())
    assert report["target"]["image_digest"] == base["digest"]
    # the native audit ran over the image too (what its interpreter has installed counts): nothing missing
    assert report["native"]["shared-objects"] >= 1 and report["native"]["missing"] == [], report["native"]
    assert [s["component"] for s in report["install"]["steps"]] == ["ark"]  # only the overlay is installed
    env = report["install"]["environment"]
    assert [(x["name"], x["state"]) for x in env["locked"]] == [("demo-ark-lib", "ok")]  # the rebuilt ARK
    others = {x["name"] for x in env["other"]}  # besides the lock: the image's stack, which the overlay runs on
    assert {"demo-engine", "demo-kernels", "standin-torch"} <= others, sorted(others)

    # a warm build takes what the image holds from the memo (an image does not change under its digest: no
    # container is started for it; the memo is changed on purpose here, and the lock shows it), while
    # `toolchain lock` reads the image again
    (memo,) = (tmp_path / "cache" / "memo").glob("base-*.json")
    real = held["demo-kernels"]["record-sha256"]
    held_data = trust.unseal(memo.read_bytes(), memo.stem)  # (edited and sealed again: an edit alone
    assert held_data is not None                                     # is a miss, core/trust.py)
    memo.write_text(trust.sealed(memo.stem, json.loads(json.dumps(held_data).replace(real, "0" * 64))))
    cli.ok("build", "--recipe", recipe, "--out", tmp_path / "out", "--cache-dir", tmp_path / "cache")
    path = tmp_path / "out" / "stack.lock.toml"
    warm = {d["name"]: d for d in tomlio.load_file(path)["base"]["dists"]}
    assert warm["demo-kernels"]["record-sha256"] == "0" * 64
    r = cli("lock", "--lock", path, "--cache-dir", tmp_path / "cache", "--json")
    assert r.returncode == 0, str(r)
    again = {d["name"]: d for d in tomlio.load_file(path)["base"]["dists"]}
    assert again["demo-kernels"]["record-sha256"] == real


def test_a_base_must_be_pinned_by_digest(tmp_path):
    recipe = demo_variant(tmp_path / "recipes", "unpinned", {"indexes": []},
                          target={"runtime": "podman", "base": "docker.io/intel/llm-scaler-vllm:0.21.0-b2"})
    r = Cli(tmp_path, isolated_env(tmp_path))("plan", "--recipe", recipe, "--json")
    assert r.returncode == 2, str(r)
    assert "target.base" in r.output
    assert "pinned by digest" in r.output


def _base(**versions: str) -> BaseEnv:
    return BaseEnv("img@sha256:" + "0" * 64, "sha256:" + "0" * 64, "3.11.2", "", "",
                   tuple(BaseDist(n, v, "") for n, v in versions.items()))


def test_an_overlay_needs_nothing_the_image_lacks_and_its_torch(demo_build):
    (engine,) = (demo_build.out / "wheels").glob("demo_engine-*.whl")  # requires packaging and tomli
    ok = overlay_closure(_base(packaging="24.2", tomli="2.2.1"), [("engine", engine, ())])
    assert ok.dists == ()
    assert ok.indexes == ()
    with pytest.raises(ResolveError, match="tomli.*does not hold"):
        overlay_closure(_base(packaging="24.2"), [("engine", engine, ())])
    from toolchain.build.built_against import BuiltAgainst

    with pytest.raises(ABIMismatch, match="2.13.0"):
        overlay_closure(_base(packaging="24.2", tomli="2.2.1", **{"standin-torch": "2.13.0+xpu"}),
                        [("engine", engine, (BuiltAgainst("standin-torch", "2.14.0+xpu"),))])


def test_a_bisect_step_of_an_overlay_builds_only_the_bisected_component(tmp_path):
    from toolchain.bisect.overlay_step import only_the_bisected
    from toolchain.recipe.load import load_recipe

    fake = "localhost/stack@sha256:" + "1" * 64
    path = demo_variant(tmp_path / "recipes", "over", {"indexes": []},
                        target={"runtime": "podman", "base": fake, "python": STACK_PYTHON})
    data = tomlio.load_file(path)
    del data["components"]["engine"]["install-args"]  # (installed over the image: the default args)
    path.write_text(tomlio.dumps(data))
    shutil.copytree(REPO / "patches", tmp_path / "patches")
    recipe = load_recipe("over", tmp_path / "recipes", tmp_path / "patches")
    assert [c.name for c in recipe.components] == ["engine", "kernels", "ark"]
    step = only_the_bisected(recipe, "ark")
    assert [c.name for c in step.components] == ["ark"]
    assert step.component("ark").after == ()
    assert step.component("ark").commit == recipe.component("ark").commit
    assert step.target.base == fake
    host = load_recipe("demo", REPO / "recipes", REPO / "patches")
    assert only_the_bisected(host, "kernels") is host  # without a base every component stays
    # that a bisect's steps go through it: the journey below


WORD_COUNT = """\
import glob, os, sys
sys.path[:0] = glob.glob(os.path.join(os.environ["TOOLCHAIN_BISECT_WHEEL_DIR"], "demo_engine-*.whl"))
from demo_engine.text import word_count
sys.exit(0 if word_count("two  words ") == 2 else 1)
"""


@pytest.mark.slow
def test_a_bisect_of_an_overlay_component_builds_it_alone_over_the_image_at_each_step(stack_image, tmp_path):
    """The demo's planted engine regression (v0.3.1 good, v0.4.0 bad: README's demo bisect), bisected in a
    recipe that rebuilds engine, kernels and ARK over the stack image: every step builds the engine alone, in a
    container of the image, and the good and bad locks are the image plus that one component."""
    recipe = demo_variant(tmp_path / "recipes", "over", {"indexes": []},
                          target={"runtime": "podman", "base": stack_image, "python": STACK_PYTHON})
    data = tomlio.load_file(recipe)
    for table in data["components"].values():
        table.pop("install-args", None)  # installed over the image: the default args
    recipe.write_text(tomlio.dumps(data))
    shutil.copytree(REPO / "patches", tmp_path / "patches")  # the demo's patches, beside its recipes/
    (tmp_path / "word-count.py").write_text(WORD_COUNT)
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    r = cli("bisect", "--recipe", recipe, "--component", "engine", "--good", "v0.3.1", "--bad", "v0.4.0",
            "--test-cmd", "python3 word-count.py", "--out", tmp_path / "bisect", "--cache-dir", tmp_path / "cache",
            "--json")
    assert r.returncode == 0, str(r)
    result = json.loads((tmp_path / "bisect" / "result.json").read_text())
    assert "count words by their spaces" in json.dumps(result), result
    for end in ("good", "bad"):
        (lock_path,) = (tmp_path / "bisect" / end).glob("*.lock.toml")
        lock = tomlio.load_file(lock_path)
        assert [c["name"] for c in lock["components"]] == ["engine"], lock["components"]
        assert lock["base"]["image"] == stack_image and lock["target"]["runtime"] == "podman"
    steps = sorted((tmp_path / "bisect" / "steps").iterdir())
    assert len(steps) >= 3  # both ends and at least one step between
    for step in steps:  # each step's build: the engine alone (kernels and ARK are the image's)
        built = {p.stem for p in (step / "logs").glob("*.log") if not p.stem.startswith(("git-", "setvars"))}
        assert built == {"engine"}, (step.name, built)
    cached = [json.loads(p.read_text())["component"] for p in (tmp_path / "cache" / "wheels").rglob("entry.json")]
    assert cached and set(cached) == {"engine"}, cached
