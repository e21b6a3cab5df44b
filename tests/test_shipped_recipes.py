"""The recipes shipped in recipes/ load, encode what UPSTREAM.md says a working XPU stack needs, and plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolchain.build.plan import make_plan
from toolchain.recipe.load import Recipe, list_recipes, load_recipe, with_changes
from toolchain.target.host import HostRuntime

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
STANDIN = ROOT / "toolchain" / "demo_src" / "oneapi-standin" / "setvars.sh"
REAL = ["ark-latest", "ark-latest-b60", "w4a16-workaround", "gdn-outproj-fix", "ark-released-kernels", "b70-direct-fix"]


def load(name: str) -> Recipe:
    return load_recipe(name, RECIPES, ROOT / "patches")


def test_every_shipped_recipe_loads_and_is_listed():
    names = {n for n, _, where in list_recipes(RECIPES) if where == "the shipped recipes"}
    assert {"demo", *REAL} <= names
    for name in names:
        recipe = load(name)
        assert recipe.description, f"{name} has no description"
        assert recipe.components


@pytest.mark.parametrize(("name", "device", "target", "aot"), [
    ("ark-latest", "b70", "intel_gpu_bmg_g31", "bmg-g31-a0"),
    ("ark-latest-b60", "b60", "intel_gpu_bmg_g21", "bmg-g21-a0"),
])
def test_ark_recipes_follow_upstream_needs(name, device, target, aot):
    r = load(name)
    order = [c.name for c in r.components]
    assert order.index("vllm") < order.index("vllm-xpu-kernels") < order.index("auto-round-lib")
    assert r.toolchain.setvars == "/opt/intel/oneapi/setvars.sh"
    assert "--force" in r.toolchain.setvars_args
    vllm, kernels, ark = (r.component(n) for n in ("vllm", "vllm-xpu-kernels", "auto-round-lib"))
    assert dict(vllm.env)["VLLM_TARGET_DEVICE"] == "xpu"
    assert vllm.install_args == ()  # vLLM installs with its dependencies ...
    assert "--no-deps" in kernels.install_args
    assert "--force-reinstall" in ark.install_args
    assert ark.subdir == "auto_round_extension/ark"
    assert ark.dist == "auto-round-lib"
    assert dict(ark.env)["BUILD_MODE"] == "release"  # the dev suffix would not satisfy vLLM's pin
    assert dict(ark.env)["ARK_SYCL_TARGET"] == target
    assert dict(kernels.env)["VLLM_XPU_AOT_DEVICES"] == aot
    assert kernels.version_env == "VLLM_VERSION_OVERRIDE"
    assert {d.name for d in kernels.fetchcontent} >= {"oneDNN", "cutlass-sycl"}
    assert r.smoke.device == device
    assert dict(r.smoke.env)["VLLM_XPU_INC_WNA16_BACKEND"] == "ark"
    for c in r.components:
        assert len(c.commit) == 40
        assert c.url.startswith("https://github.com/")


def test_variants_change_only_what_they_say():
    base, w4a16, gdn = load("ark-latest"), load("w4a16-workaround"), load("gdn-outproj-fix")
    assert dict(w4a16.smoke.env)["VLLM_XPU_INC_WNA16_BACKEND"] == "w4a16"
    assert w4a16.components == base.components
    vllm = gdn.component("vllm")
    assert [p.label.rsplit("/", 1)[-1] for p in vllm.patches][-1] == "0001-gdn-outproj-weight-getattr.patch"
    remote = vllm.patches[0]
    assert remote.remote
    assert len(remote.sha256) == 64
    assert remote.url.endswith("intel/llm-scaler.git")


def test_gdn_patch_makes_the_check_tolerate_quantized_layers():
    text = (ROOT / "patches/vllm/0001-gdn-outproj-weight-getattr.patch").read_text()
    added = [line for line in text.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert any('getattr(self.out_proj, "weight", None)' in line for line in added)


def test_plans_differ_per_card(tmp_path):
    """With the stand-in toolchain, both ARK recipes plan; card-specific knobs give different cache keys."""
    keys = {}
    for name in ("ark-latest", "ark-latest-b60"):
        r = with_changes(load(name), {"toolchain": {"setvars": str(STANDIN)}})
        with HostRuntime(r.target) as rt:
            plan = make_plan(r, rt)
        assert plan.toolchain.oneapi_version == "2025.2.0"  # the stand-in's banner, parsed like ARK does
        keys[name] = {c.name: c.cache_key for c in plan.components}
    assert keys["ark-latest"]["vllm"] == keys["ark-latest-b60"]["vllm"]
    assert keys["ark-latest"]["auto-round-lib"] != keys["ark-latest-b60"]["auto-round-lib"]
    assert keys["ark-latest"]["vllm-xpu-kernels"] != keys["ark-latest-b60"]["vllm-xpu-kernels"]


def test_the_released_kernels_recipe_takes_the_pypi_wheel_and_builds_ark_against_it():
    r = load("ark-released-kernels")
    assert [c.name for c in r.components] == ["vllm", "vllm-xpu-kernels", "auto-round-lib"]  # the install order
    _vllm, kernels, ark = r.components
    assert kernels.prebuilt is not None
    assert kernels.prebuilt.requirement == "vllm-xpu-kernels==0.1.16.2"
    assert not kernels.url
    assert not kernels.commit
    assert kernels.command == ()
    assert kernels.dist == "vllm-xpu-kernels"
    assert {"--no-deps", "--force-reinstall"} <= set(kernels.install_args)
    assert ark.subdir == "auto_round_extension/ark"
    assert len(ark.commit) == 40
    assert ark.url.startswith("https://github.com/")
    assert set(ark.built_against) == {"torch", "vllm-xpu-kernels"}  # ABI-checked against the prebuilt
    assert dict(ark.env)["BUILD_MODE"] == "release"
    assert dict(ark.env)["ARK_SYCL_TARGET"] == "intel_gpu_bmg_g31"
    assert r.toolchain.setvars == "/opt/intel/oneapi/setvars.sh"  # builds only: smoke serves without oneAPI
    assert "https://pypi.org/simple" in r.resolve.indexes
    assert r.smoke.device == "b70"
    assert dict(r.smoke.env)["VLLM_XPU_INC_WNA16_BACKEND"] == "ark"


def test_the_b70_direct_fix_rebuilds_only_ark_over_the_pinned_llm_scaler_image():
    r = load("b70-direct-fix")
    named = (RECIPES / "ark-latest.toml").read_text()  # the image and digest ark-latest.toml names
    assert r.target.runtime in ("podman", "docker")
    assert "intel/llm-scaler-vllm@sha256:" in r.target.base
    assert r.target.base.rsplit("@sha256:", 1)[1] in named
    assert r.target.image == r.target.base
    (ark,) = r.components  # vLLM and the kernels are the image's: nothing else is built
    assert ark.name == "auto-round-lib"
    assert ark.url == "https://github.com/intel/auto-round.git"
    assert len(ark.commit) == 40
    assert ark.subdir == "auto_round_extension/ark"
    assert ark.dist == "auto-round-lib"
    assert {"--force-reinstall", "--no-deps"} <= set(ark.install_args)  # installed over the image
    assert dict(ark.env)["BUILD_MODE"] == "release"
    assert dict(ark.env)["ARK_SYCL_TARGET"] == "intel_gpu_bmg_g31"
    assert ark.built_against == ("torch",)
    assert r.toolchain.setvars == "/opt/intel/oneapi/setvars.sh"  # for the build: smoke serves without oneAPI
    assert dict(r.smoke.env)["VLLM_XPU_INC_WNA16_BACKEND"] == "ark"
