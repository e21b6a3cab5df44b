"""Finding and reading recipes: `recipes/NAME.toml` (or a path) → the resolved table (`extends` applied) →
a validated, frozen `Recipe` (recipe.validate, recipe.model).

`extends` names another recipe: by name, looked up in the declaring recipe's own directory first, then in
the project's recipes (`--recipes-dir`, $TOOLCHAIN_RECIPES_DIR, ./recipes, the shipped ones); or by a path
relative to the declaring file. Each inherited key keeps the file that declared it, so its relative paths
(patches, setvars, mirrors) resolve against that file. Nothing is written while a recipe is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolchain.core import toml as tomlio
from toolchain.core.names import did_you_mean
from toolchain.errors import RecipeError
from toolchain.recipe.model import (
    DEFAULT_COMMAND,
    Component,
    FetchContentDep,
    Origin,
    Patch,
    Recipe,
    SmokeSpec,
    TargetSpec,
    ToolchainSpec,
)
from toolchain.recipe.validate import SMOKE_KEYS, from_data

RECIPES_ENV = "TOOLCHAIN_RECIPES_DIR"
MAX_RECIPE_BYTES = 1 << 20  # a recipe is a page of TOML; a larger file is a mistake, not a recipe
MAX_DEPTH = 32              # tables and arrays nested deeper than this are a mistake too


# ---- locating recipes -------------------------------------------------------------------------------

def default_recipes_dir() -> Path:
    if os.environ.get(RECIPES_ENV):
        return Path(os.environ[RECIPES_ENV])
    if Path("recipes").is_dir():
        return Path("recipes").resolve()
    return Path(__file__).resolve().parents[2] / "recipes"


def recipe_path(name_or_path: str, recipes_dir: Path | None = None) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.is_file():
        return p.resolve()
    rdir = recipes_dir or default_recipes_dir()
    candidate = rdir / f"{name_or_path}.toml"
    if candidate.is_file():
        return candidate.resolve()
    known = sorted(q.stem for q in rdir.glob("*.toml")) if rdir.is_dir() else []
    raise RecipeError(f"no recipe {name_or_path!r} in {rdir}" + did_you_mean(name_or_path, known),
                      hint=f"available: {', '.join(known) or 'none'}; `toolchain recipes` lists them, "
                           f"or pass a path to a .toml file")


def list_recipes(recipes_dir: Path | None = None) -> list[tuple[str, str]]:
    """(name, description) of every recipe file; one that cannot be read is listed with why."""
    rdir = recipes_dir or default_recipes_dir()
    out = []
    for p in sorted(rdir.glob("*.toml")):
        try:
            desc = str(read_recipe_file(p).get("description", ""))
        except RecipeError as exc:
            desc = f"({str(exc).removeprefix(f'{p}: ').split(': ')[0]})"  # e.g. "(not valid TOML)"
        out.append((p.stem, desc))
    return out


# ---- reading one file ---------------------------------------------------------------------------------

def read_recipe_file(path: Path) -> dict[str, Any]:
    """The TOML table of one recipe file; a file that is too large, not UTF-8 text, not TOML or nested
    too deeply is a RecipeError naming it."""
    try:
        size = path.stat().st_size
        if size > MAX_RECIPE_BYTES:
            raise RecipeError(f"{path}: too large: {size} bytes; a recipe is at most {MAX_RECIPE_BYTES} bytes",
                              hint="is this the right file? a recipe is a page of TOML")
        raw = path.read_bytes()
    except OSError as exc:
        raise RecipeError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    return parse_recipe_text(raw, str(path))


def parse_recipe_text(raw: bytes | str, where: str) -> dict[str, Any]:
    if len(raw) > MAX_RECIPE_BYTES:
        raise RecipeError(f"{where}: too large: {len(raw)} bytes; a recipe is at most {MAX_RECIPE_BYTES} bytes")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise RecipeError(f"{where}: not UTF-8 text: byte {exc.start} is not; a recipe is a TOML file",
                          hint="is this the right file?") from None
    try:
        data = tomlio.loads(text)
    except tomlio.TOMLDecodeError as exc:
        raise RecipeError(f"{where}: not valid TOML: {exc}", hint="fix the syntax at the line shown") from None
    except RecursionError:
        data = None
    if data is None or _depth(data) > MAX_DEPTH:
        raise RecipeError(f"{where}: nested too deeply: tables or arrays more than {MAX_DEPTH} deep",
                          hint="is this the right file?")
    return data


def _depth(value: Any) -> int:
    """How deeply tables and arrays nest (without recursion: the input may be hostile)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if d > MAX_DEPTH:
            return d
        deepest = max(deepest, d)
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


# ---- loading ------------------------------------------------------------------------------------------

def load_recipe(name_or_path: str, recipes_dir: Path | None = None, patches_dir: Path | None = None, *,
                pinned: bool = True) -> Recipe:
    """`pinned=False` (for `toolchain update`) accepts components whose `commit` is not set yet.
    `patches_dir` replaces the patches/ directory of the recipe and of the recipes beside it."""
    path = recipe_path(name_or_path, recipes_dir)

    def patches_of(recipe_file: Path) -> Path:
        if patches_dir is not None and recipe_file.parent == path.parent:
            return patches_dir
        return recipe_file.parent.parent / "patches"

    project = (recipes_dir or default_recipes_dir()).resolve()
    data, origins = _resolve_extends(path, project, patches_of, [])
    own = Origin(path, (patches_of(path),))
    return from_data(data, name=path.stem, path=path, patches_dir=own.patches_dirs, pinned=pinned,
                     origins={k: o for k, o in origins.items() if o != own})


def load_recipe_text(text: str, name: str, path: Path, patches_dir: Path | Sequence[Path]) -> Recipe:
    """A resolved recipe (as recorded in a lock) back into a Recipe. Its local patches are looked up in
    `patches_dir` (several directories are searched in order: a recipe may inherit patches)."""
    data = parse_recipe_text(text, f"{path} (the recipe recorded in the lock)")
    return from_data(data, name=name, path=path, patches_dir=patches_dir)


def _resolve_extends(path: Path, project: Path, patches_of, seen: list[Path]) -> tuple[dict[str, Any],
                                                                                       dict[str, Origin]]:
    """The merged table and, for each path-bearing key, the recipe file that declared it."""
    if path in seen:
        chain = " -> ".join(p.stem for p in [*seen, path])
        raise RecipeError(f"{seen[0]}: extends: cycle {chain}", hint="remove one `extends` from the cycle")
    data = read_recipe_file(path)
    parent = data.get("extends")
    own = {k: v for k, v in data.items() if k != "extends"}
    if parent is None:
        base: dict[str, Any] = {}
        origins: dict[str, Origin] = {}
    else:
        if not isinstance(parent, str) or not parent:
            raise RecipeError(f"{path}: extends: must be the name of another recipe or a path to one (a string)")
        base, origins = _resolve_extends(_parent_path(parent, path, project), project, patches_of, [*seen, path])
        base.pop("description", None)
    origin = Origin(path, (patches_of(path),))
    for key in _path_keys(own):
        origins[key] = origin
    return _merge(base, own), origins


def _parent_path(parent: str, child: Path, project: Path) -> Path:
    """`extends = parent` of `child`: a path (relative to the child's file), else a name looked up beside the
    child, then in the project's recipes."""
    if parent.endswith(".toml") or "/" in parent or os.sep in parent:
        p = child.parent / Path(parent).expanduser()
        if p.is_file():
            return p.resolve()
        raise RecipeError(f"{child}: extends: no recipe file {parent!r} (a relative path is relative to "
                          f"{child.parent})", hint="fix the path, or name a recipe of the project's recipes/")
    for rdir in dict.fromkeys([child.parent, project]):
        if (rdir / f"{parent}.toml").is_file():
            return (rdir / f"{parent}.toml").resolve()
    known = sorted({q.stem for d in (child.parent, project) if d.is_dir() for q in d.glob("*.toml")})
    where = f"{child.parent} or {project}" if child.parent != project else str(project)
    raise RecipeError(f"{child}: extends: no recipe {parent!r} in {where}" + did_you_mean(parent, known),
                      hint=f"available: {', '.join(known) or 'none'}; pass --recipes-dir for another "
                           "project's recipes, or write a path to the .toml file")


def _path_keys(data: dict[str, Any]) -> list[str]:
    """The keys of a recipe table whose relative paths resolve against the file that declares them."""
    keys = []
    if isinstance(data.get("toolchain"), dict) and "setvars" in data["toolchain"]:
        keys.append("toolchain.setvars")
    if isinstance(data.get("mirrors"), dict):
        keys += [f"mirrors.{k}" for k in data["mirrors"]]
    if isinstance(data.get("components"), dict):
        keys += [f"components.{name}.patches" for name, c in data["components"].items()
                 if isinstance(c, dict) and "patches" in c]
    return keys


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Tables merge key by key; everything else (arrays included) is replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# ---- derived recipes ----------------------------------------------------------------------------------

def with_data(recipe: Recipe, data: dict[str, Any]) -> Recipe:
    """`recipe` with its resolved table replaced by `data` (validated again; inherited keys keep resolving
    against the recipe that declared them)."""
    return from_data(data, name=recipe.name, path=recipe.path, patches_dir=recipe.patches_dirs,
                     origins=recipe.origins)


def with_commit(recipe: Recipe, component: str, commit: str, ref: str | None = None) -> Recipe:
    """A derived recipe with one component pinned elsewhere (used by bisect)."""
    recipe.component(component)
    return with_data(recipe, _merge(recipe.data, {"components": {component: {"commit": commit,
                                                                             **({"ref": ref} if ref else {})}}}))


def with_changes(recipe: Recipe, changes: dict[str, Any]) -> Recipe:
    """A derived recipe with a nested table of keys overridden (same rules as `extends`)."""
    return with_data(recipe, _merge(recipe.data, changes))


__all__ = ["DEFAULT_COMMAND", "MAX_RECIPE_BYTES", "RECIPES_ENV", "SMOKE_KEYS", "Component", "FetchContentDep",
           "Origin", "Patch", "Recipe", "SmokeSpec", "TargetSpec", "ToolchainSpec", "default_recipes_dir",
           "did_you_mean", "from_data", "list_recipes", "load_recipe", "load_recipe_text", "parse_recipe_text",
           "read_recipe_file", "recipe_path", "with_changes", "with_commit", "with_data"]
