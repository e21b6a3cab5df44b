"""The one serializer of the dataclasses that go to JSON and TOML (toolchain/core/serial.py): what a bisect
saves as its context and a lock as its target and toolchain comes back equal, through real JSON and TOML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolchain.bisect.session import BisectOptions
from toolchain.core import toml as tomlio
from toolchain.core.serial import from_data, to_data
from toolchain.smoke import SmokeOptions
from toolchain.sources.mirrors import Rewrite
from toolchain.target.facts import TargetInfo, ToolchainInfo


def test_bisect_options_come_back_equal_through_json(tmp_path: Path) -> None:
    opts = BisectOptions(mode="commits", out=tmp_path / "out", test_timeout=30.0, recipe=tmp_path / "r.toml",
                         component="kernels", good="a" * 40, rewrites=(Rewrite("https://x/", "file:///m/"),),
                         smoke=SmokeOptions(device="b60", cases=("math", "qa"), venv=tmp_path / "venv", port=8011))
    back = BisectOptions.from_dict(json.loads(json.dumps(opts.to_dict())))
    assert back == opts
    assert isinstance(back.smoke, SmokeOptions)
    assert isinstance(back.smoke.venv, Path)
    assert isinstance(back.rewrites[0], Rewrite)


def test_lock_facts_come_back_equal_through_toml_with_kebab_keys() -> None:
    info = ToolchainInfo(setvars="/opt/intel/oneapi/setvars.sh", setvars_args=("--force",), oneapi_version="2025.1")
    target = TargetInfo(runtime="podman", python_tag="cp311", image_digest="sha256:" + "0" * 64)
    text = tomlio.dumps({"toolchain": to_data(info, kebab=True), "target": to_data(target, kebab=True)})
    assert "setvars-args = [" in text
    assert "image-digest = " in text
    data = tomlio.loads(text)
    assert from_data(ToolchainInfo, data["toolchain"], kebab=True) == info
    assert from_data(TargetInfo, data["target"], kebab=True) == target


def test_an_unknown_key_is_named() -> None:
    with pytest.raises(TypeError, match="unknown key.*for TargetInfo: colour"):
        from_data(TargetInfo, {"runtime": "host", "colour": "blue"})
