"""The one serializer of the dataclasses that go to JSON and TOML (toolchain/core/serial.py): what a bisect
saves as its context and a lock as its target and toolchain comes back equal, through real JSON and TOML."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from toolchain.bisect.session import BisectOptions
from toolchain.core import toml as tomlio
from toolchain.core.serial import from_data, meta, rounded, schema, to_data, to_table
from toolchain.resolve.closure import Closure, LockedDist
from toolchain.smoke.config import SmokeOptions
from toolchain.sources.mirrors import Rewrite
from toolchain.target.facts import TargetInfo, ToolchainInfo


def test_bisect_options_come_back_equal_through_json(tmp_path: Path) -> None:
    opts = BisectOptions(mode="commits", out=tmp_path / "out", test_timeout=30.0, recipe=tmp_path / "r.toml",
                         component="kernels", good="a" * 40, rewrites=(Rewrite("https://x/", "file:///m/"),),
                         smoke=SmokeOptions(device="b60", cases=("math", "qa"), venv=tmp_path / "venv", port=8011))
    back = from_data(BisectOptions, json.loads(json.dumps(to_table(opts))))
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


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Leaf:
    path: str = field(metadata=meta(key="file"))
    soname: str = field(default="", metadata=meta(omit_default=True))
    seconds: float = field(default=0.0, metadata=meta(dump=rounded(2)))


@dataclass(frozen=True)
class Tree:
    name: str
    colour: Colour
    leaves: tuple[Leaf, ...] = ()
    by_key: Mapping[str, Leaf] = field(default_factory=dict)
    where: Path | None = None
    note: str = field(default="", metadata=meta(omit_default=True))
    scratch: str = field(default="", metadata=meta(skip=True))


def test_nested_frozen_dataclasses_come_back_equal_with_renamed_keys_and_omitted_defaults(tmp_path: Path) -> None:
    tree = Tree("t", Colour.BLUE, (Leaf("a/b.so", "libb.so.1", 1.25), Leaf("a/c.so")), {"k": Leaf("x.so")},
                tmp_path / "w", note="kept")
    data = to_table(tree, kebab=True)
    assert data == {"name": "t", "colour": "blue",
                    "leaves": [{"file": "a/b.so", "soname": "libb.so.1", "seconds": 1.25}, {"file": "a/c.so", "seconds": 0.0}],
                    "by-key": {"k": {"file": "x.so", "seconds": 0.0}}, "where": str(tmp_path / "w"), "note": "kept"}
    text = tomlio.dumps(data)
    back = from_data(Tree, tomlio.loads(text), kebab=True)
    assert back == tree
    assert isinstance(back.leaves, tuple) and isinstance(back.leaves[0], Leaf) and isinstance(back.colour, Colour)
    assert isinstance(back.by_key["k"], Leaf) and back.where == tmp_path / "w"
    assert from_data(Tree, json.loads(json.dumps(data)), kebab=True) == tree


def test_a_default_is_left_out_a_skipped_field_never_written_and_a_missing_key_takes_its_default() -> None:
    data = to_table(Tree("t", Colour.RED, scratch="not part of the format"))
    assert list(data) == ["name", "colour", "leaves", "by_key", "where"]  # field order; note and scratch left out
    assert from_data(Tree, {"name": "t", "colour": "red"}) == Tree("t", Colour.RED)
    assert to_table(Leaf("f", seconds=1.23456)) == {"file": "f", "seconds": 1.23}


def test_an_unknown_key_is_refused_with_its_name_also_in_a_nested_table_and_for_a_skipped_field() -> None:
    with pytest.raises(TypeError, match="unknown key.*for Leaf: path"):  # the field is written "file"
        from_data(Tree, {"name": "t", "colour": "red", "leaves": [{"path": "x"}]})
    with pytest.raises(TypeError, match="unknown key.*for Tree: scratch"):
        from_data(Tree, {"name": "t", "colour": "red", "scratch": "x"})
    with pytest.raises(ValueError, match="'green' is not a valid Colour"):
        from_data(Tree, {"name": "t", "colour": "green"})


def test_a_locks_resolve_table_may_leave_out_every_setting_as_its_schema_allows() -> None:
    closure = Closure.from_toml({}, [{"name": "numpy", "version": "2.1.0", "file": "numpy-2.1.0.tar.gz",
                                      "url": "https://example.invalid/numpy-2.1.0.tar.gz", "sha256": "6" * 64}])
    assert closure.resolver == "" and closure.indexes == () and closure.resolved_at == ""
    assert closure.dists == (LockedDist(name="numpy", version="2.1.0", file="numpy-2.1.0.tar.gz",
                                        url="https://example.invalid/numpy-2.1.0.tar.gz", sha256="6" * 64),)
    with pytest.raises(TypeError, match="unknown key.*for Closure: dists"):  # the dists are not a setting
        Closure.from_toml({"dists": []}, [])


_NAME = ("a non-empty string", lambda v: isinstance(v, str) and bool(v))
_STRS = ("an array of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v))


@dataclass(frozen=True)
class _Declared:
    """A format declared once: a sub-table by dotted keys, checks, what a missing key reads as."""
    name: str = field(metadata=meta(key="recipe.name", check=_NAME))
    text: str = field(metadata=meta(key="recipe.text", check=("a string", lambda v: isinstance(v, str)), absent=""))
    args: tuple[str, ...] = field(metadata=meta(check=_STRS, absent=()))
    tag: str = "new"
    partial: tuple[str, ...] = field(default=(), metadata=meta(key="recipe.partial", omit_default=True))


def test_one_declaration_gives_writer_reader_and_schema_with_a_dotted_key_sub_table() -> None:
    obj = _Declared(name="demo", text="x = 1", args=("-v",), partial=("a",))
    text = tomlio.dumps(to_table(obj, kebab=True))
    assert "[recipe]" in text and 'name = "demo"' in text and "recipe.name" not in text
    data = tomlio.loads(text)
    assert data["recipe"] == {"name": "demo", "text": "x = 1", "partial": ["a"]}
    assert from_data(_Declared, data, kebab=True) == obj
    # a missing key reads as its `absent` (not the dataclass default: there is none, or it differs)
    assert from_data(_Declared, {"recipe": {"name": "demo"}}, kebab=True) == _Declared("demo", "", ())
    # the schema: required is neither a default nor an `absent`; only fields that declare a check
    declared = schema(_Declared, kebab=True)
    assert {k: required for k, (required, _) in declared.items()} == {
        "recipe.name": True, "recipe.text": False, "args": False}
    what, ok = declared["recipe.name"][1]
    assert what == "a non-empty string" and ok("x") and not ok("")


def test_an_unknown_key_is_left_unread_only_when_asked_and_named_otherwise() -> None:
    data = {"recipe": {"name": "demo", "later": 1}, "args": [], "extra": True}
    with pytest.raises(TypeError, match=r"unknown key\(s\) for _Declared: extra, recipe.later"):
        from_data(_Declared, data, kebab=True)
    assert from_data(_Declared, data, kebab=True, unknown_ok=True) == _Declared("demo", "", ())
