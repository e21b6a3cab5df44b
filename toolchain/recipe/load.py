"""Finding and reading recipes: `recipes/NAME.toml` (or a path) → the resolved table (`extends` applied) →
a validated, frozen `Recipe` (recipe.validate, recipe.model).

`extends` names another recipe: by name, looked up in the declaring recipe's own directory first, then in
the project's recipes (`--recipes-dir`, $TOOLCHAIN_RECIPES_DIR, ./recipes, the shipped ones); or by a path
relative to the declaring file. Each inherited key keeps the file that declared it, so its relative paths
(patches, setvars, mirrors) resolve against that file. Nothing is written while a recipe is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from toolchain.core import toml as tomlio
from toolchain.core.names import did_you_mean
from toolchain.core.record import replace
from toolchain.errors import RecipeError
from toolchain.recipe.model import (
    DEFAULT_COMMAND,
    Component,
    FetchContentDep,
    Found,
    Origin,
    Patch,
    Recipe,
    Recorded,
    SmokeSpec,
    Swap,
    TargetSpec,
    ToolchainSpec,
)
from toolchain.recipe.validate import SMOKE_KEYS, validated

RECIPES_ENV = "TOOLCHAIN_RECIPES_DIR"
MAX_RECIPE_BYTES = 1 << 20  # a recipe is a page of TOML; a larger file is a mistake, not a recipe
MAX_DEPTH = 32              # tables and arrays nested deeper than this are a mistake too


# ---- locating recipes -------------------------------------------------------------------------------

SHIPPED = Path(__file__).resolve().parents[1] / "shipped"   # package data: the shipped recipes and patches


def shipped_recipes_dir() -> Path:
    """The directory of the recipes shipped inside the package."""
    return SHIPPED / "recipes"


def project_recipes_dir(recipes_dir: Path | None = None) -> tuple[Path, str] | None:
    """The user's recipes directory and how it was chosen: --recipes-dir, else $TOOLCHAIN_RECIPES_DIR, else
    ./recipes when it exists; None when there is none (only the shipped recipes are then searched)."""
    if recipes_dir is not None:
        return Path(recipes_dir).expanduser().resolve(), "--recipes-dir"
    if os.environ.get(RECIPES_ENV):
        return Path(os.environ[RECIPES_ENV]).expanduser().resolve(), f"${RECIPES_ENV}"
    if Path("recipes").is_dir():
        return Path("recipes").resolve(), "./recipes"
    return None


def search_dirs(recipes_dir: Path | None = None, beside: Path | None = None) -> list[tuple[Path, str]]:
    """Where a recipe NAME is looked up, in order: beside the recipe that names it (for `extends`), the
    user's recipes (--recipes-dir, $TOOLCHAIN_RECIPES_DIR or ./recipes), then the shipped recipes. Each
    directory once, with how it came to be searched."""
    dirs: list[tuple[Path, str]] = []
    if beside is not None:
        dirs.append((beside.resolve(), f"beside {beside.name}/"))
    project = project_recipes_dir(recipes_dir)
    if project is not None and project[0] != shipped_recipes_dir():  # (a checkout's ./recipes is the shipped)
        dirs.append(project)
    dirs.append((shipped_recipes_dir(), "the shipped recipes"))
    out: dict[Path, str] = {}
    for d, why in dirs:
        out.setdefault(d, why)
    return list(out.items())


def default_recipes_dir() -> Path:
    """The user's recipes directory, else the shipped recipes."""
    project = project_recipes_dir()
    return project[0] if project is not None else shipped_recipes_dir()


def find_recipe(name_or_path: str, recipes_dir: Path | None = None, beside: Path | None = None,
                *, who: str = "") -> Found:
    """A recipe by path (a .toml file, relative to `beside` when given, else to the working directory) or by
    name (`search_dirs`), and where it was found. `who` prefixes the error (the file and key naming it)."""
    if name_or_path.endswith(".toml") or "/" in name_or_path or os.sep in name_or_path:
        base = beside if beside is not None else Path.cwd()
        path = base / Path(name_or_path).expanduser()
        if path.is_file():
            return Found(name_or_path, path.resolve(), "a path")
        raise RecipeError(f"{who}no recipe file {name_or_path!r} (a relative path is relative to {base})",
                          hint="fix the path, or name a recipe (`toolchain recipes` lists them)")
    dirs = search_dirs(recipes_dir, beside)
    for d, why in dirs:
        if (d / f"{name_or_path}.toml").is_file():
            if why == "./recipes":  # found for where the user stands, not named by them: whose is it?
                check_found_here(Path.cwd() / "recipes" / f"{name_or_path}.toml", who=who)
            return Found(name_or_path, (d / f"{name_or_path}.toml").resolve(), why)
    known = sorted({q.stem for d, _ in dirs if d.is_dir() for q in d.glob("*.toml")})
    searched = ", then ".join(f"{d} ({why})" for d, why in dirs)
    raise RecipeError(f"{who}no recipe {name_or_path!r} in {searched}" + did_you_mean(name_or_path, known),
                      hint=f"available: {', '.join(known) or 'none'}; `toolchain recipes` lists them; pass "
                           "--recipes-dir (or set $TOOLCHAIN_RECIPES_DIR) for another folder of recipes, or a "
                           "path to a .toml file")


def check_found_here(file: Path, *, who: str = "") -> None:
    """A recipe found by name in ./recipes is run only when it, every folder on the way to it and the patches
    beside it (`patches_dirs_of`) are this user's or root's and writable by no one else (core/trust.py's walk,
    no shared group): in a folder others can
    write (a shared /tmp), another user's ./recipes/NAME.toml would otherwise run with this user's rights, as
    git's `safe.directory` (CVE-2022-24765) refuses a repository another user owns. Else RecipeError (exit 2)
    naming the path and the fix."""
    from toolchain.core import trust

    why = ""
    try:
        why = trust.folder_problem(file.parent, shared=False)
        if not why:
            link = os.lstat(file)
            if os.path.islink(file) and link.st_uid not in (os.geteuid(), 0):
                why = f"{file} is a symbolic link of uid {link.st_uid}"
            elif os.path.islink(file):
                why = trust.folder_problem(os.path.dirname(os.path.realpath(file)), shared=False)
            if not why and (bad := trust.problem(os.stat(file), shared=False)):
                why = f"{file} is {bad}"
        for patches in patches_dirs_of(file):  # (what it applies to the sources: the same rule, each file)
            if not why and patches.is_dir():
                why = trust.folder_problem(patches, shared=False) or _tree_problem(patches)
    except OSError as exc:
        why = f"{file} cannot be read ({exc.strerror})"
    if why:
        raise RecipeError(f"{who}the recipe {file} was found in ./recipes of the current folder, which is not "
                          f"trusted: {why}",
                          hint=f"pass --recipes-dir with a folder of yours (or the path to a .toml you trust), or "
                               f"take ownership: chown -R $USER {file.parent} && chmod -R go-w {file.parent}")


def _tree_problem(top: Path) -> str:
    """Why a folder of patches is not trusted below its top ("" when it is): each folder and file in it this
    user's or root's and writable by no one else (core/trust.py, no shared group), no link of another user's."""
    from toolchain.core import trust

    for root, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            path = os.path.join(root, name)
            st = os.lstat(path)
            if os.path.islink(path):
                bad = f"a symbolic link of uid {st.st_uid}" if st.st_uid not in (os.geteuid(), 0) else ""
            else:
                bad = trust.problem(st, folder=name in dirs, shared=False)
            if bad:
                return f"{path} is {bad}"
    return ""


def recipe_path(name_or_path: str, recipes_dir: Path | None = None) -> Path:
    """The file a recipe name or path refers to (see `find_recipe` for where it looks)."""
    return find_recipe(name_or_path, recipes_dir).file


def patches_dirs_of(recipe_file: Path) -> tuple[Path, ...]:
    """Where the patches a recipe file names live: patches/ beside it (a recipe with its patches, no recipes/
    level), else patches/ beside its directory (recipes/ and patches/ side by side)."""
    beside, up = recipe_file.parent / "patches", recipe_file.parent.parent / "patches"
    return (beside,) if beside.is_dir() else (up,)


def list_recipes(recipes_dir: Path | None = None) -> list[tuple[str, str, str]]:
    """(name, description, where) of every recipe file the user's recipes and the shipped ones hold (a
    shipped one hidden by a user's recipe of the same name is left out); one that cannot be read is listed
    with why."""
    out, names = [], set()
    for rdir, why in search_dirs(recipes_dir):
        for p in sorted(rdir.glob("*.toml"), key=lambda p: p.stem):  # by name: stack before stack-b60
            if p.stem in names:
                continue
            names.add(p.stem)
            try:
                desc = str(read_recipe_file(p).get("description", ""))
            except RecipeError as exc:
                desc = f"({str(exc).removeprefix(f'{p}: ').split(': ')[0]})"  # e.g. "(not valid TOML)"
            out.append((p.stem, desc, why))
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
    """A recipe's TOML text parsed; an oversized, non-UTF-8 or malformed one is a RecipeError naming `where`."""
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

def given_dirs(given: Path | Sequence[Path] | None) -> tuple[Path, ...]:
    """`--patches-dir` as folders in the order given (it is repeatable): none, one or several."""
    if given is None:
        return ()
    return (Path(given),) if isinstance(given, (str, Path)) else tuple(Path(d) for d in given)


def load_recipe(name_or_path: str, recipes_dir: Path | None = None,
                patches_dir: Path | Sequence[Path] | None = None, *, pinned: bool = True) -> Recipe:
    """`pinned=False` (for `toolchain update`) accepts components whose `commit` is not set yet.
    `patches_dir` (one folder or several, in order) is searched first for the patches of the recipe and of
    the recipes beside it (their own patches/ folders stay searched after it)."""
    top = find_recipe(name_or_path, recipes_dir)
    path = top.file
    first = given_dirs(patches_dir)

    def patches_of(recipe_file: Path) -> tuple[Path, ...]:
        if first and recipe_file.parent == path.parent:
            return tuple(dict.fromkeys([*first, *patches_dirs_of(recipe_file)]))
        return patches_dirs_of(recipe_file)

    found = [top]
    swaps: list[Swap] = []
    data, origins = _resolve_extends(path, recipes_dir, patches_of, [], found, swaps)
    own = Origin(path, patches_of(path))
    recipe = validated(data, name=path.stem, path=path, patches_dir=own.patches_dirs, pinned=pinned,
                       origins={k: o for k, o in origins.items() if o != own})
    return replace(recipe, found=tuple(found), swaps=tuple(swaps))


def load_recipe_text(text: str, name: str, path: Path, patches_dir: Path | Sequence[Path],
                     origins: Mapping[str, Origin] = MappingProxyType({}), recorded: Recorded | None = None) -> Recipe:
    """A resolved recipe (as recorded in a lock) back into a Recipe. Its local patches are looked up in
    `patches_dir` (several directories are searched in order: a recipe may inherit patches); `origins`: the
    keys the lock records as declared by another recipe file (their relative paths resolve against it);
    `recorded`: the lock's hashes of those files, to take one from the cache when its place is empty."""
    data = parse_recipe_text(text, f"{path} (the recipe recorded in the lock)")
    return validated(data, name=name, path=path, patches_dir=patches_dir, origins=origins, recorded=recorded)


def _resolve_extends(path: Path, recipes_dir: Path | None, patches_of: Callable[[Path], tuple[Path, ...]],
                     seen: list[Path], found: list[Found],
                     swaps: list[Swap]) -> tuple[dict[str, Any], dict[str, Origin]]:
    """The merged table and, for each path-bearing key, the recipe file that declared it; `found` gets
    where each parent was found, `swaps` each inherited component swapped (`_swap`)."""
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
        where = find_recipe(parent, recipes_dir, beside=path.parent, who=f"{path}: extends: ")
        found.append(where)
        base, origins = _resolve_extends(where.file, recipes_dir, patches_of, [*seen, path], found, swaps)
        base.pop("description", None)
        base = _swap(base, own, path, origins, swaps)
    origin = Origin(path, patches_of(path))
    for key in _path_keys(own, base):
        origins[key] = origin
    return _without(_merge_recipe(base, own, origins), _dropped(own)), origins


SWAP_KEEPS = ("after", "dist", "import")  # what an inherited component keeps when it is swapped
SWAP_BACK_GIVES = ("url", "commit", "ref")  # what a swap back gives anew (the rest of a source build is restored)


def _swap(base: dict[str, Any], own: dict[str, Any], file: Path, origins: dict[str, Origin],
          swaps: list[Swap]) -> dict[str, Any]:
    """`base` with each inherited component that `own` swaps reduced to SWAP_KEEPS: `prebuilt` written over a
    component built from source (its url, commit, patches, env, ... go: a prebuilt takes none of them), or
    `url` written over an inherited prebuilt (back to a build from source: the recipe gives url and commit).
    The inherited keys' origins go with them."""
    comps, inherited = own.get("components"), base.get("components")
    if not isinstance(comps, dict) or not isinstance(inherited, dict):
        return base
    out = dict(inherited)
    for name, c in comps.items():
        old = inherited.get(name)
        if not isinstance(c, dict) or not isinstance(old, dict) or c.get("drop") is True:
            continue
        if "prebuilt" in c and "prebuilt" not in old:
            to = "prebuilt"
        elif "prebuilt" in old and "prebuilt" not in c and "url" in c:
            to = "source"
        else:
            continue
        out[name] = {k: v for k, v in old.items() if k in SWAP_KEEPS}
        mine = {k: origins.pop(k) for k in [k for k in origins if k.startswith(f"components.{name}.")]}
        dropped = tuple(k for k in old if k not in SWAP_KEEPS)
        if to == "prebuilt":
            swaps.append(Swap(name, to, file, dropped, removed=dict(old), removed_origins=mine))
            continue
        # back to a build from source: the keys the nearest swap for a prebuilt removed come back (fetchcontent,
        # built-against, inputs, patches, command, ...), with their origins; the recipe gives url and commit anew
        before = next((s for s in reversed(swaps) if s.component == name and s.to == "prebuilt"), None)
        back = {k: v for k, v in before.removed.items() if k not in (*SWAP_KEEPS, *SWAP_BACK_GIVES)} if before else {}
        out[name].update(back)
        for key, o in (before.removed_origins.items() if before else ()):
            if key.split(".")[2] in back:
                origins[key] = o
        swaps.append(Swap(name, to, file, dropped, tuple(back), before.file.name if before and back else ""))
    return {**base, "components": out}


def _dropped(data: dict[str, Any]) -> list[str]:
    """The components a recipe drops (`[components.NAME] drop = true`: an inherited one it does not build)."""
    comps = data.get("components")
    return [n for n, c in comps.items() if isinstance(c, dict) and c.get("drop") is True] \
        if isinstance(comps, dict) else []


def _without(data: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """`data` without the components `names`, and without them in the others' `after`."""
    if not names or not isinstance(data.get("components"), dict):
        return data
    comps = {}
    for n, c in data["components"].items():
        if n in names:
            continue
        if isinstance(c, dict) and isinstance(c.get("after"), list):
            c = {**c, "after": [a for a in c["after"] if a not in names]}
        comps[n] = c
    return {**data, "components": comps}


def _path_keys(data: dict[str, Any], base: Mapping[str, Any] = MappingProxyType({})) -> list[str]:
    """The keys of a recipe table whose relative paths resolve against the file that declares them; each
    entry of `extend-patches` is a key of its own (`components.NAME.extend-patches.I`, counted after the
    entries `base` holds)."""
    keys = []
    if isinstance(data.get("toolchain"), dict) and "setvars" in data["toolchain"]:
        keys.append("toolchain.setvars")
    if isinstance(data.get("mirrors"), dict):
        keys += [f"mirrors.{k}" for k in data["mirrors"]]
    if isinstance(data.get("components"), dict):
        inherited = base.get("components", {}) if isinstance(base.get("components"), dict) else {}
        for name, c in data["components"].items():
            if not isinstance(c, dict):
                continue
            keys += [f"components.{name}.{key}" for key in ("patches", "inputs") if key in c]
            extend = c.get("extend-patches")
            if isinstance(extend, list):
                first = 0 if "patches" in c else len(_extends_of(inherited.get(name)))
                keys += [f"components.{name}.extend-patches.{first + i}" for i in range(len(extend))]
    return keys


def _extends_of(component: Any) -> list[Any]:
    value = component.get("extend-patches", []) if isinstance(component, dict) else []
    return value if isinstance(value, list) else []


def _merge_recipe(base: dict[str, Any], over: dict[str, Any], origins: dict[str, Origin]) -> dict[str, Any]:
    """`_merge`, and `extend-patches` appended after the inherited series (ruff's `extend-select`): a
    component's `patches` replaces the inherited series, the inherited `extend-patches` with it."""
    merged = _merge(base, over)
    comps, inherited = over.get("components"), base.get("components")
    if not isinstance(comps, dict) or not isinstance(inherited, dict):
        return merged
    for name, c in comps.items():
        if not isinstance(c, dict) or not isinstance(merged["components"].get(name), dict):
            continue
        if "patches" in c:
            old = _extends_of(inherited.get(name))
            for i in range(len(old)):
                origins.pop(f"components.{name}.extend-patches.{i}", None)
            if "extend-patches" not in c:
                merged["components"][name].pop("extend-patches", None)
        elif isinstance(c.get("extend-patches"), list):
            merged["components"][name]["extend-patches"] = [*_extends_of(inherited.get(name)), *c["extend-patches"]]
    return merged


# ---- where a recipe file is, as a lock records it --------------------------------------------------------

SHIPPED_PLACE = "{shipped}"


def place(file: Path) -> str:
    """A recipe file as a lock records it: under the shipped recipes `{shipped}/recipes/NAME.toml` (found
    again wherever the tool is installed), else its path."""
    try:
        return f"{SHIPPED_PLACE}/{Path(file).resolve().relative_to(SHIPPED).as_posix()}"
    except ValueError:
        return str(file)


def from_place(text: str) -> Path:
    """The path a recorded place names: a shipped recipe file, or the path as written."""
    if text.startswith(SHIPPED_PLACE + "/"):
        return SHIPPED / text[len(SHIPPED_PLACE) + 1:]
    return Path(text)


def recorded_origins(recipe: Recipe) -> dict[str, str]:
    """Every path-bearing key of the resolved recipe and the file that declared it (`place`), as a lock
    records them so that a rebuild from the lock resolves each relative path as the build did."""
    return {key: place(recipe.origin(key).file) for key in _path_keys(recipe.data)}


def origins_from_record(record: Mapping[str, str], patches_dirs: Sequence[Path] = (),
                        first: Sequence[Path] = ()) -> dict[str, Origin]:
    """`recorded_origins` read back: `first` (a bundle's patches/, --patches-dir), then each file's patches/,
    then `patches_dirs`."""
    def dirs(file: Path) -> tuple[Path, ...]:
        return tuple(dict.fromkeys([*first, *patches_dirs_of(file), *patches_dirs]))

    return {key: Origin(from_place(text), dirs(from_place(text))) for key, text in record.items()}


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
    return replace(validated(data, name=recipe.name, path=recipe.path, patches_dir=recipe.patches_dirs,
                                         origins=recipe.origins), found=recipe.found, swaps=recipe.swaps)


def only_components(recipe: Recipe, names: Sequence[str]) -> Recipe:
    """The recipe with only the components `names` (`toolchain build --component`): what a partial build
    builds and its lock records, with the names in `partial`."""
    for name in names:
        recipe.component(name)  # an unknown name: a RecipeError with a did-you-mean
    keep = [c.name for c in recipe.components if c.name in names]
    data = _without(recipe.data, [c.name for c in recipe.components if c.name not in keep])
    return replace(with_data(recipe, data), partial=tuple(keep))


def with_changes(recipe: Recipe, changes: dict[str, Any]) -> Recipe:
    """A derived recipe with a nested table of keys overridden (same rules as `extends`)."""
    return with_data(recipe, _merge(recipe.data, changes))


__all__ = [
    "DEFAULT_COMMAND",
    "MAX_RECIPE_BYTES",
    "RECIPES_ENV",
    "SMOKE_KEYS",
    "Component",
    "FetchContentDep",
    "Found",
    "Origin",
    "Patch",
    "Recipe",
    "SmokeSpec",
    "TargetSpec",
    "ToolchainSpec",
    "default_recipes_dir",
    "did_you_mean",
    "find_recipe",
    "from_place",
    "given_dirs",
    "list_recipes",
    "load_recipe",
    "load_recipe_text",
    "only_components",
    "origins_from_record",
    "parse_recipe_text",
    "patches_dirs_of",
    "place",
    "read_recipe_file",
    "recipe_path",
    "recorded_origins",
    "search_dirs",
    "shipped_recipes_dir",
    "validated",
    "with_changes",
    "with_data",
]
