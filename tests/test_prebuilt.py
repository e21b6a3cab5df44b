"""Prebuilt components: a released wheel taken instead of a build (`prebuilt = "dist==version"` from the
[resolve] indexes and find-links, or `prebuilt = {url, sha256}`), as a user's journey through the CLI:
plan, build, lock, bundle, --from-lock, the ABI check of a component built against it, and a tampered file.
The index is a real PEP 503 index served over HTTP on 127.0.0.1 (tests/support/closure.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.spine_helpers import STANDIN_SETVARS, Cli, isolated_env
from tests.support.closure import REPO, demo_variant, served, simple_index, wheelhouse
from toolchain.build.prebuilt_wheels import prebuilt_key
from toolchain.core import toml as tomlio
from toolchain.core.fs import sha256_file


@pytest.fixture(scope="module")
def kernels_release(demo_build, tmp_path_factory):
    """The demo kernels wheel as if released: a PEP 503 index (the demo's wheelhouse plus that wheel) in a
    folder to serve over HTTP; returns (folder, wheel file)."""
    root = tmp_path_factory.mktemp("release")
    (wheel,) = (demo_build.out / "wheels").glob("demo_kernels-*.whl")
    links = wheelhouse(root / "links")
    shutil.copyfile(wheel, links / wheel.name)
    simple_index(links, root / "index")
    return root / "index", wheel


def _version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def _prebuilt_recipe(recipes: Path, name: str, url: str, kernels: dict, ark: dict | None = None,
                     setvars: Path | None = None) -> Path:
    path = demo_variant(recipes, name, {"indexes": [f"{url}/simple"]})
    shutil.copytree(REPO / "patches", recipes.parent / "patches", dirs_exist_ok=True)
    data = tomlio.load_file(path)
    data["components"]["kernels"] = {"after": ["engine"], "dist": "demo-kernels", "import": "demo_kernels",
                                     **kernels}
    if ark:
        data["components"]["ark"].update(ark)
    if setvars:
        data["toolchain"]["setvars"] = str(setvars)
    path.write_text(tomlio.dumps(data))
    return path


def _setvars_with_site(tmp: Path, site: Path) -> Path:
    """A stand-in setvars that also puts `site` on PYTHONPATH: the build environment of a component built
    against the prebuilt kernels has them installed (as a real one has the released wheel)."""
    script = tmp / "setvars-with-kernels.sh"
    script.write_text(f'source "{STANDIN_SETVARS}" "$@"\nexport PYTHONPATH="{site}:$PYTHONPATH"\n')
    return script


def test_a_prebuilt_from_the_index_is_pinned_locked_bundled_and_rebuilt_from_the_lock(kernels_release, tmp_path):
    index, wheel = kernels_release
    version = _version(wheel)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    str(wheel)], check=True, timeout=120)
    setvars = _setvars_with_site(tmp_path, site)
    cli = Cli(tmp_path, isolated_env(tmp_path))
    with served(index) as url:
        recipe = _prebuilt_recipe(tmp_path / "recipes", "pre", url, {"prebuilt": f"demo-kernels=={version}"},
                                  {"built-against": ["demo-kernels"]}, setvars)
        plan = cli.ok("plan", "--recipe", recipe, "--cache-dir", tmp_path / "cache", "--json").json()
        (kern,) = [c for c in plan["components"] if c["name"] == "kernels"]
        assert kern["prebuilt"]["requirement"] == f"demo-kernels=={version}"
        assert "command" not in kern
        text = cli.ok("plan", "--recipe", recipe, "--cache-dir", tmp_path / "cache")
        assert "prebuilt" in text.stdout
        assert f"demo-kernels=={version}" in text.stdout

        r = cli.ok("build", "--recipe", recipe, "--out", tmp_path / "out", "--cache-dir", tmp_path / "cache",
                   "--bundle", "--json")
    lock = tomlio.load_file(tmp_path / "out" / "stack.lock.toml")
    (locked,) = [c for c in lock["components"] if c["name"] == "kernels"]
    assert locked["wheel"] == {"file": wheel.name, "sha256": sha256_file(wheel), "size": wheel.stat().st_size}
    assert locked["prebuilt"] == {"requirement": f"demo-kernels=={version}", "sha256": sha256_file(wheel),
                                  "url": f"{url}/files/{wheel.name}", "index": f"{url}/simple"}
    assert (tmp_path / "out" / "wheels" / wheel.name).read_bytes() == wheel.read_bytes()
    assert "nothing was compiled" in (tmp_path / "out" / "logs" / "kernels.log").read_text()
    assert "compiler-cache" not in locked
    assert "metrics" not in locked
    (ark,) = [c for c in lock["components"] if c["name"] == "ark"]
    assert ark["built-against"] == [{"name": "demo-kernels", "version": version, "cxx11-abi": ""}]
    assert any(d["name"] == "standin-torch" for d in lock["dependencies"])  # its requirements are resolved
    (bundle,) = [p for p in (tmp_path / "out" / "bundles").iterdir() if p.is_dir()]
    assert (bundle / "wheels" / wheel.name).read_bytes() == wheel.read_bytes()
    assert f"{wheel.name} --hash=sha256:{sha256_file(wheel)}" in (bundle / "requirements.lock.txt").read_text()
    assert r.json()

def _warm_cache(demo_build, dest: Path) -> Path:
    """A copy of the demo's cache: the components built from source are served from it."""
    shutil.copytree(demo_build.cache, dest)
    return dest


def test_from_lock_takes_the_pinned_file_and_a_bundle_installs_it_like_a_built_wheel(kernels_release, demo_build,
                                                                                      tmp_path):
    index, wheel = kernels_release
    cli = Cli(tmp_path, isolated_env(tmp_path))
    with served(index) as url:
        recipe = _prebuilt_recipe(tmp_path / "recipes", "pre", url, {"prebuilt": f"demo-kernels=={_version(wheel)}"})
        r = cli.ok("build", "--recipe", recipe, "--out", tmp_path / "out", "--cache-dir",
                   _warm_cache(demo_build, tmp_path / "cache"), "--json")
        assert [c["name"] for c in r.json()["components"]] == ["engine", "kernels", "ark"]
        # a fresh cache: the rebuild downloads exactly the file the lock pins (and compiles only the others)
        cli.ok("build", "--from-lock", tmp_path / "out" / "stack.lock.toml", "--out", tmp_path / "again",
               "--cache-dir", _warm_cache(demo_build, tmp_path / "fresh-cache"), "--bundle", "--with-deps")
    assert (tmp_path / "again" / "wheels" / wheel.name).read_bytes() == wheel.read_bytes()
    assert list((tmp_path / "fresh-cache" / "wheels").rglob(wheel.name))  # cached like a built wheel
    # the bundle installs it like a built wheel: hashes required, no index, then pip check
    (bundle,) = [p for p in (tmp_path / "again" / "bundles").iterdir() if p.is_dir()]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--require-hashes", "-r",
                    "requirements.lock.txt"], cwd=bundle, check=True, timeout=300)
    subprocess.run([py, "-m", "pip", "check"], check=True, timeout=120)
    shown = subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('demo-kernels'))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert shown == _version(wheel)


def test_a_tampered_prebuilt_is_refused_and_never_cached(kernels_release, demo_build, tmp_path):
    index, wheel = kernels_release
    cli = Cli(tmp_path, isolated_env(tmp_path))
    tampered = tmp_path / "served"
    shutil.copytree(index, tampered)
    target = tampered / "files" / wheel.name
    with zipfile.ZipFile(target, "a") as z:
        z.writestr("demo_kernels/backdoor.py", "print('owned')\n")
    with served(tampered) as url:
        recipe = _prebuilt_recipe(tmp_path / "recipes", "pinned", url, {"prebuilt": {
            "url": f"{url}/files/{wheel.name}", "sha256": sha256_file(wheel)}})
        r = cli("build", "--recipe", recipe, "--out", tmp_path / "out", "--cache-dir",
                _warm_cache(demo_build, tmp_path / "cache"), "--json")
    assert r.returncode == 1, str(r)
    assert "refused the prebuilt wheel" in r.output
    assert sha256_file(target) in r.output
    assert sha256_file(wheel) in r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "out" / "stack.lock.toml").exists()
    key = prebuilt_key(sha256_file(wheel))
    assert not (tmp_path / "cache" / "wheels" / key[:2] / key).exists()


def test_a_component_built_against_another_build_of_the_prebuilt_fails_the_abi_check(kernels_release, tmp_path):
    index, wheel = kernels_release
    site = tmp_path / "site"
    info = site / "demo_kernels-9.9.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-kernels\nVersion: 9.9.9\n")
    cli = Cli(tmp_path, isolated_env(tmp_path))
    with served(index) as url:
        recipe = _prebuilt_recipe(tmp_path / "recipes", "other", url, {"prebuilt": f"demo-kernels=={_version(wheel)}"},
                                  {"built-against": ["demo-kernels"]}, _setvars_with_site(tmp_path, site))
        r = cli("build", "--recipe", recipe, "--out", tmp_path / "out", "--cache-dir", tmp_path / "cache", "--json")
    assert r.returncode == 1, str(r)
    assert "ABI mismatch" in r.output
    assert "9.9.9" in r.output
    assert _version(wheel) in r.output
    assert not (tmp_path / "out" / "stack.lock.toml").exists()


def test_a_prebuilt_takes_no_build_keys_and_needs_an_exact_pin(tmp_path):
    cli = Cli(tmp_path, isolated_env(tmp_path))
    recipe = _prebuilt_recipe(tmp_path / "recipes", "bad", "http://127.0.0.1:9", {
        "prebuilt": "demo-kernels>=1", "command": ["make"], "patches": ["x.patch"]})
    r = cli("plan", "--recipe", recipe, "--json")
    assert r.returncode == 2, str(r)
    for text in ("components.kernels.prebuilt", "not an exact pin", "components.kernels.command",
                 "components.kernels.patches", "never compiled"):
        assert text in r.output


@pytest.mark.slow
def test_the_released_vllm_xpu_kernels_from_pypi_resolve_lock_and_install_as_a_prebuilt(tmp_path):
    """The real vllm-xpu-kernels 0.1.16.2 (150 MB) pinned from PyPI, locked and installed; it is downloaded once
    per machine into the shared test cache (tests/support/pypi_wheels.py), which this build uses as its cache."""
    from tests.support.pypi_wheels import VLLM_XPU_KERNELS, real_wheel, toolchain_cache

    real_wheel()  # (downloaded once per machine; served from the wheel cache after that)
    cli = Cli(tmp_path, isolated_env(tmp_path))
    recipe = tmp_path / "recipes" / "released-kernels.toml"
    recipe.parent.mkdir()
    recipe.write_text(tomlio.dumps({
        "description": "the released kernels wheel", "toolchain": {"setvars": ""},
        "target": {"runtime": "host", "python": sys.executable},
        "resolve": {"indexes": ["https://pypi.org/simple"]},
        "components": {"vllm-xpu-kernels": {"prebuilt": VLLM_XPU_KERNELS.requirement,
                                            "import": "vllm_xpu_kernels"}}}))
    # alone, its closure has neither torch nor intel-sycl-rt (its METADATA requires nothing): the native audit
    # stops the lock (issue 24), naming what its shared objects need
    r = cli("build", "--recipe", recipe, "--out", tmp_path / "closed", "--cache-dir", toolchain_cache(), "--json")
    assert r.returncode == 1 and r.json()["kind"] == "NativeABIError", str(r)
    assert "libsycl.so.9: missing; needed by 12 files in vllm-xpu-kernels 0.1.16.2" in r.json()["error"]
    # without a closure (--no-resolve) the audit is recorded and the lock written
    r = cli.ok("build", "--recipe", recipe, "--out", tmp_path / "out", "--cache-dir", toolchain_cache(), "--json",
               "--no-resolve")
    lock = tomlio.load_file(tmp_path / "out" / "stack.lock.toml")
    xpu_c = next(o for a in lock["native"] for o in a["objects"] if o["file"] == "vllm_xpu_kernels/_xpu_C.abi3.so")
    assert "libsycl.so.9" in xpu_c["needed"] and lock["native"][0]["role"] == "prebuilt"
    (kern,) = lock["components"]
    assert kern["wheel"] == {"file": VLLM_XPU_KERNELS.file, "sha256": VLLM_XPU_KERNELS.sha256,
                             "size": VLLM_XPU_KERNELS.size}
    assert kern["prebuilt"]["url"] == VLLM_XPU_KERNELS.url
    assert kern["prebuilt"]["index"] == "https://pypi.org/simple"  # (pinned from the index all the same)
    assert r.json()["components"][0]["sha256"] == VLLM_XPU_KERNELS.sha256
    # installed as smoke and bundles install a lock's wheels: the locked file with its sha256 required
    reqs = tmp_path / "requirements.lock.txt"
    reqs.write_text(f"{tmp_path / 'out' / 'wheels' / kern['wheel']['file']} --hash=sha256:{kern['wheel']['sha256']}\n")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--require-hashes",
                    "--target", str(target), "-r", str(reqs)], check=True, timeout=600)
    record = next(target.glob("vllm_xpu_kernels-0.1.16.2.dist-info")) / "RECORD"
    assert "vllm_xpu_kernels/_xpu_C.abi3.so" in record.read_text()
