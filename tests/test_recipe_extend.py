"""Extending recipes (issue 19): `extend-patches` appends with each entry resolved against the recipe that
declares it, `patches` still replaces (the inherited `extend-patches` with it), `drop = true` leaves out an
inherited component, and a partial build's recipe (`only_components`). In process: loading only."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolchain.commands.plan import swap_line
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


def test_prebuilt_swaps_an_inherited_component_and_url_swaps_it_back(base, tmp_path):
    """Issue 33: `prebuilt` over an inherited component built from source replaces it (its build keys go,
    after / dist / import stay), and `url` over an inherited prebuilt swaps it back to source."""
    team = base.read_text().replace('[components.kernels]\n', '[components.engine.env]\nX = "1"\n'
                                    '[[components.engine.fetchcontent]]\nname = "dep"\n'
                                    f'url = "file:///nowhere/dep.git"\ncommit = "{"d" * 40}"\n'
                                    '[components.kernels]\n', 1)
    base.write_text(team.replace('[components.engine]\n', '[components.engine]\ndist = "team-engine"\n'
                                 'import = "team_engine"\nsubdir = "py"\nbuilt-against = ["torch"]\n', 1))
    sha = "e" * 64
    mine = _project(tmp_path / "me", "mine", f'extends = "{base}"\n[components.engine]\n'
                    f'prebuilt = {{ url = "file:///wheels/team_engine-1.0-py3-none-any.whl", sha256 = "{sha}" }}\n', {})
    r = load_recipe(str(mine))
    engine = r.component("engine")
    assert engine.prebuilt is not None and engine.prebuilt.sha256 == sha
    assert (engine.url, engine.commit, engine.subdir, engine.patches, engine.env, engine.fetchcontent,
            engine.built_against) == ("", "", "", (), (), (), ())
    assert (engine.dist, engine.import_name) == ("team-engine", "team_engine")  # kept
    assert r.component("kernels").after == ("engine",)
    (swap,) = r.swaps
    assert (swap.component, swap.to, swap.file) == ("engine", "prebuilt", mine)
    assert {"url", "commit", "patches", "subdir", "env", "fetchcontent", "built-against"} <= set(swap.dropped)
    assert not any(k.startswith("components.engine.") for k in recorded_origins(r))  # the team's patch went

    back = _project(tmp_path / "me", "back", 'extends = "mine"\n[components.engine]\n'
                    f'url = "file:///nowhere/engine.git"\ncommit = "{"f" * 40}"\n', {})
    r = load_recipe(str(back))
    engine = r.component("engine")
    assert engine.prebuilt is None and engine.commit == "f" * 40 and engine.url == "file:///nowhere/engine.git"
    assert (engine.dist, engine.import_name) == ("team-engine", "team_engine")
    assert [(s.component, s.to) for s in r.swaps] == [("engine", "prebuilt"), ("engine", "source")]
    # issue 40: the swap back restores what the swap for a prebuilt removed, from the recipe that had it (two
    # levels up), each path resolving against the recipe that declared it; url and commit are the swapper's own
    assert [p.file for p in engine.patches] == [base.parent.parent / "patches" / "engine" / "0001-base.patch"]
    assert (engine.subdir, dict(engine.env), [f.name for f in engine.fetchcontent], engine.built_against) == \
        ("py", {"X": "1"}, ["dep"], ("torch",))
    swap = r.swaps[1]
    assert {"patches", "subdir", "env", "fetchcontent", "built-against"} <= set(swap.restored)
    assert not {"url", "commit", "ref"} & set(swap.restored) and swap.restored_from == "mine.toml"
    assert {k: v for k, v in recorded_origins(r).items() if k.startswith("components.engine.")} == \
        {"components.engine.patches": str(base)}  # the lock records where the restored patch came from
    line = swap_line(swap)
    assert "restored" in line and "fetchcontent" in line and "mine.toml" in line and "back.toml" in line
    # a key the swapping recipe writes wins over the restored one
    own = _project(tmp_path / "me", "own", 'extends = "mine"\n[components.engine]\n'
                   f'url = "file:///nowhere/engine.git"\ncommit = "{"f" * 40}"\npatches = []\nsubdir = ""\n', {})
    engine = load_recipe(str(own)).component("engine")
    assert (engine.patches, engine.subdir, engine.built_against) == ((), "", ("torch",))
    # a prebuilt written beside a build key of the same table is still refused: that key is the user's own
    both = _project(tmp_path / "me", "both", f'extends = "{base}"\n[components.engine]\nsubdir = "x"\n'
                    f'prebuilt = "team-engine==1.0"\n', {})
    with pytest.raises(RecipeError, match="engine.subdir: a prebuilt component is never compiled"):
        load_recipe(str(both))


def test_a_recipe_error_points_at_what_a_wheel_install_has(tmp_path):
    """Issue 40: a wheel has no docs/DESIGN.md; the hint names the README's section and the shipped recipes."""
    bad = _project(tmp_path / "me", "bad", '[components.engine]\nurl = 3\n', {})
    with pytest.raises(RecipeError) as err:
        load_recipe(str(bad))
    hint = err.value.hint or ""
    assert "DESIGN.md" not in hint and "README's Recipes section" in hint and "toolchain recipes" in hint, hint
