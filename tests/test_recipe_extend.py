"""Extending recipes (issue 19): `extend-patches` appends with each entry resolved against the recipe that
declares it, `patches` still replaces (the inherited `extend-patches` with it), `drop = true` leaves out an
inherited component, and a partial build's recipe (`only_components`). In process: loading only."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolchain.errors import RecipeError
from toolchain.recipe.load import load_recipe, only_components, recorded_origins

COMPONENT = 'url = "file:///nowhere/{name}.git"\ncommit = "{commit}"\n'


def _project(root: Path, name: str, text: str, patches: dict[str, str]) -> Path:
    (root / "recipes").mkdir(parents=True, exist_ok=True)
    for rel, body in patches.items():
        (root / "patches" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "patches" / rel).write_text(body)
    path = root / "recipes" / f"{name}.toml"
    path.write_text(text)
    return path


@pytest.fixture
def base(tmp_path) -> Path:
    comps = "".join(f"[components.{n}]\n" + COMPONENT.format(name=n, commit=c * 40) + extra
                    for n, c, extra in (("engine", "a", 'patches = ["engine/0001-base.patch"]\n'),
                                        ("kernels", "b", 'after = ["engine"]\n'),
                                        ("ark", "c", 'after = ["kernels"]\n')))
    return _project(tmp_path / "team", "base", f'[toolchain]\nsetvars = ""\n{comps}',
                    {"engine/0001-base.patch": "the team's\n"})


def test_extend_patches_appends_and_each_entry_resolves_against_its_recipe(base, tmp_path):
    mine = _project(tmp_path / "me", "mine", f'extends = "{base}"\n[components.engine]\n'
                    'extend-patches = ["engine/0002-mine.patch"]\n', {"engine/0002-mine.patch": "mine\n"})
    grand = _project(tmp_path / "me", "grand", 'extends = "mine"\n[components.engine]\n'
                     'extend-patches = ["engine/0003-more.patch"]\n', {"engine/0003-more.patch": "more\n"})
    r = load_recipe(str(grand))
    files = [p.file for p in r.component("engine").patches]
    assert files == [base.parent.parent / "patches" / "engine" / "0001-base.patch",
                     mine.parent.parent / "patches" / "engine" / "0002-mine.patch",
                     grand.parent.parent / "patches" / "engine" / "0003-more.patch"]
    assert recorded_origins(r)["components.engine.extend-patches.0"] == str(mine)
    # `patches` replaces the inherited series, the inherited extend-patches with it
    replaced = _project(tmp_path / "me", "replaced", 'extends = "grand"\n[components.engine]\n'
                        'patches = ["engine/0003-more.patch"]\n', {})
    assert [p.path for p in load_recipe(str(replaced)).component("engine").patches] == ["engine/0003-more.patch"]


def test_drop_leaves_out_an_inherited_component_and_its_place_in_after(base, tmp_path):
    mine = _project(tmp_path / "me", "mine", f'extends = "{base}"\n[components.kernels]\ndrop = true\n', {})
    r = load_recipe(str(mine))
    assert [c.name for c in r.components] == ["engine", "ark"]
    assert r.component("ark").after == ()
    assert "kernels" not in r.text


def test_only_components_is_a_partial_recipe_naming_what_it_builds(base):
    r = only_components(load_recipe(str(base)), ["ark", "engine"])
    assert [c.name for c in r.components] == ["engine", "ark"]
    assert r.partial == ("engine", "ark")
    assert r.component("ark").after == ()
    with pytest.raises(RecipeError, match="did you mean 'kernels'"):
        only_components(load_recipe(str(base)), ["kernel"])
