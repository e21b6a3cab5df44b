"""Each recipe key is declared once, on the model field it fills (recipe/keys.py): what the check accepts is
what the model declares, and a key lands in the field that declares it."""

from __future__ import annotations

from dataclasses import field
from pathlib import Path

import pytest

from toolchain.core.record import record
from toolchain.errors import RecipeError
from toolchain.recipe.keys import key, keys_of
from toolchain.recipe.load import load_recipe_text
from toolchain.recipe.model import Component, Recipe, ResolveSpec, SmokeSpec, TargetSpec

BASE = """\
[toolchain]
setvars = ""
[components.engine]
url = "https://example.invalid/engine.git"
commit = "0123456789abcdef0123456789abcdef01234567"
"""


@record
class _Table:
    plain_name: str = field(default="", metadata=key(str))
    renamed: int = field(default=0, metadata=key(int, "other-name"))
    not_a_key: str = ""


def test_keys_of_names_each_declared_field_in_kebab_case_then_the_extras() -> None:
    assert keys_of(_Table) == {"plain-name": str, "other-name": int}
    assert list(keys_of(_Table, extra_key=bool)) == ["plain-name", "other-name", "extra-key"]


def test_the_model_declares_the_keys_a_recipe_writes() -> None:
    assert keys_of(Component)["import"] is str and "import-name" not in keys_of(Component)
    assert keys_of(Component)["memory-per-job"] is str  # "8GiB" in the recipe, bytes in the field
    assert keys_of(SmokeSpec)["ready-timeout"] is int
    assert "raw" not in keys_of(SmokeSpec) and "name" not in keys_of(Recipe) and "name" not in keys_of(Component)


def _load(tmp_path: Path, text: str) -> Recipe:
    path = tmp_path / "r.toml"
    path.write_text(text, encoding="utf-8")
    return load_recipe_text(text, "r", path, tmp_path / "patches")


def test_each_declared_key_lands_in_the_field_that_declares_it(tmp_path: Path) -> None:
    recipe = _load(tmp_path, BASE + """\
import = "engine_mod"
version-env = "ENGINE_VERSION"
built-against = ["torch"]
install-args = ["--no-deps", "--force-reinstall", "--no-index"]
[target]
runtime = "podman"
image = "example.invalid/img:1"
run-args = ["--device", "/dev/dri"]
[resolve]
find-links = ["wheels"]
index-strategy = "unsafe-best-match"
python-version = "3.12"
[smoke]
served-model-name = "m"
max-model-len = 4096
serve-args = ["--enforce-eager"]
""")
    engine = recipe.component("engine")
    assert (engine.import_name, engine.version_env, engine.built_against) == ("engine_mod", "ENGINE_VERSION", ("torch",))
    assert engine.install_args == ("--no-deps", "--force-reinstall", "--no-index")
    assert recipe.target == TargetSpec(runtime="podman", image="example.invalid/img:1", run_args=("--device", "/dev/dri"))
    assert (recipe.resolve.find_links[-1].endswith("wheels"), recipe.resolve.index_strategy,
            recipe.resolve.python_version) == (True, "unsafe-best-match", "3.12")
    assert recipe.resolve.indexes == ResolveSpec().indexes
    assert (recipe.smoke.served_model_name, recipe.smoke.max_model_len, recipe.smoke.serve_args) == \
        ("m", 4096, ("--enforce-eager",))


@pytest.mark.parametrize(("text", "where"), [
    ('name = "x"\n' + BASE, "r.toml: name: unknown key"),  # a field of the model that no recipe key fills
    (BASE + 'import-name = "m"\n', "components.engine.import-name: unknown key (did you mean 'import'?"),
    (BASE + "[smoke]\nready-timeout = \"5\"\n", "smoke.ready-timeout: must be an integer"),
])
def test_a_key_the_model_does_not_declare_or_of_another_type_is_refused(tmp_path: Path, text: str,
                                                                         where: str) -> None:
    with pytest.raises(RecipeError) as caught:
        _load(tmp_path, text)
    assert where in str(caught.value)
