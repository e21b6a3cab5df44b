"""Typed recipe edits: `Recipe.with_commit`, `with_prebuilt_wheel` and `with_only` give the recipe the recipe
check would read from the edited table (every compared field, the resolved text a lock records), checking only
what they change; a bisect step derives its recipe with them and validates nothing again."""

from __future__ import annotations

import pytest

from toolchain.bisect.commitwheels import with_commit_wheel
from toolchain.bisect.overlay_step import only_the_bisected
from toolchain.errors import RecipeError
from toolchain.recipe import load
from toolchain.recipe.load import load_recipe, with_changes, with_data
from toolchain.recipe.model import Recipe

SHA = "0123456789abcdef0123456789abcdef01234567"
WHEEL_SHA = "ab" * 32


def _same(typed: Recipe, validated: Recipe) -> None:
    assert typed == validated
    assert typed.data == validated.data
    assert typed.text == validated.text


def _tables(recipe: Recipe) -> dict:
    return {name: dict(table) for name, table in recipe.data["components"].items()}


@pytest.mark.parametrize("recipe_name", ["demo", "ark-latest", "ark-released-kernels"])
def test_each_edit_equals_the_recipe_check_of_the_edited_table(recipe_name):
    recipe = load_recipe(recipe_name)
    for comp in recipe.components:
        tables = _tables(recipe)
        tables[comp.name].update(commit=SHA, ref="v9")
        _same(recipe.with_commit(comp.name, SHA, "v9"), with_data(recipe, {**recipe.data, "components": tables}))

        tables = _tables(recipe)
        table = {k: v for k, v in tables[comp.name].items()
                 if k in ("prebuilt", "after", "dist", "import", "install-args", "commit", "ref", "drop")}
        tables[comp.name] = {**table, "prebuilt": {"url": f"https://example.invalid/{comp.name}-1-py3-none-any.whl",
                                                   "sha256": WHEEL_SHA}}
        _same(recipe.with_prebuilt_wheel(comp.name, f"https://example.invalid/{comp.name}-1-py3-none-any.whl",
                                         WHEEL_SHA), with_data(recipe, {**recipe.data, "components": tables}))

        alone = {comp.name: {k: v for k, v in _tables(recipe)[comp.name].items() if k != "after"}}
        _same(recipe.with_only(comp.name), with_data(recipe, {**recipe.data, "components": alone}))
    assert recipe.with_commit(recipe.components[0].name, SHA).components[1:] == recipe.components[1:]


def test_an_edit_checks_what_it_changes():
    recipe = load_recipe("demo")
    with pytest.raises(RecipeError, match=r"components\.engine\.commit: 'abc123' is not a full 40-hex"):
        recipe.with_commit("engine", "abc123")
    with pytest.raises(RecipeError, match="no component 'engin'.*engine"):
        recipe.with_commit("engin", SHA)
    with pytest.raises(RecipeError, match=r"prebuilt\.url: .* without credentials"):
        recipe.with_prebuilt_wheel("engine", "https://user:secret@example.invalid/e-1-py3-none-any.whl", WHEEL_SHA)
    with pytest.raises(RecipeError, match=r"prebuilt\.url: .*not the URL of one wheel"):
        recipe.with_prebuilt_wheel("engine", "https://example.invalid/e-1.tar.gz", WHEEL_SHA)
    with pytest.raises(RecipeError, match=r"prebuilt\.sha256"):
        recipe.with_prebuilt_wheel("engine", "https://example.invalid/e-1-py3-none-any.whl", "beef")


def test_a_bisect_step_validates_no_recipe_again(tmp_path, monkeypatch):
    """The step's derivations as the builder makes them (the commit, the overlay's one component, the
    commit's wheel from the prebuilt-index): the recipe check runs for none of them."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = wheels / f"demo_kernels-0.1.dev1+g{SHA[:12]}-py3-none-any.whl"
    wheel.write_bytes(b"a per-commit wheel")
    base = with_changes(load_recipe("demo"), {"components": {"kernels": {"prebuilt-index": str(wheels)}}})
    checks = []
    real = load.validated

    def counted(*args, **kwargs):
        checks.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(load, "validated", counted)
    step = with_commit_wheel(only_the_bisected(base.with_commit("kernels", SHA), "kernels"), "kernels")
    assert checks == []
    kernels = step.component("kernels")
    assert kernels.prebuilt is not None
    assert kernels.prebuilt.url == wheel.resolve().as_uri()
    assert kernels.commit == SHA
    assert step.data["components"]["kernels"]["prebuilt"]["url"] == wheel.resolve().as_uri()
    assert "prebuilt-index" not in step.data["components"]["kernels"]
    assert with_data(step, step.data) == step  # what the step's lock records reads back as the same recipe
    assert len(checks) == 1  # (that read-back is the one check, made here by the test)


def test_the_table_follows_the_component_by_the_keys_the_model_declares():
    """`edited_table`: a changed field is written under the key the model declares for it (`import` for
    import_name), one back at its default is removed, the others stay as written and where they were; a value
    no edit writes (a patch) is refused rather than written wrongly."""
    import dataclasses

    from toolchain.recipe.model import Patch, edited_table

    recipe = load_recipe("demo")
    comp = recipe.components[0]
    before = dict(recipe.data["components"][comp.name])
    changed = dataclasses.replace(comp, import_name="demo_x", install_args=("--no-deps",), version="9.1")
    table = edited_table(before, comp, changed)
    assert (table["import"], table["install-args"], table["version"]) == ("demo_x", ["--no-deps"], "9.1")
    assert list(table)[:len(before)] == list(before) and all(table[k] == v for k, v in before.items()
                                                             if k not in ("import", "install-args", "version"))
    back = edited_table(table, changed, dataclasses.replace(changed, version=""))
    assert "version" not in back and back["import"] == "demo_x"
    with pytest.raises(TypeError, match="patches: a typed edit writes no tuple"):
        edited_table(before, comp, dataclasses.replace(comp, patches=(Patch("x.patch", sha256="0" * 64),)))
