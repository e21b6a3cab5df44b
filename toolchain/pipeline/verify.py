"""The way back from a lock to the recipe it records, with every recorded hash checked, and what a rebuild
from a lock recorded differently."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from toolchain.build.plan import component_env
from toolchain.core.fs import sha256_bytes
from toolchain.core.record import replace
from toolchain.core.redact import redact_argv, redact_text
from toolchain.errors import RecipeError
from toolchain.lock import Lock, LockedComponent, fetchcontent_table, locked_env, wheel_problems
from toolchain.recipe.load import (
    default_recipes_dir,
    from_place,
    given_dirs,
    load_recipe_text,
    origins_from_record,
    patches_dirs_of,
)
from toolchain.recipe.model import Prebuilt, Recipe, Recorded
from toolchain.recipe.validate import MissingFiles
from toolchain.resolve.closure import Closure


def rebuild_differences(expected: Lock, rebuilt: Lock) -> list[str]:
    """What a rebuild from `expected` recorded differently: components, commits, wheel names, sizes, sha256."""
    out = []
    names = [c.name for c in expected.components]
    got = [c.name for c in rebuilt.components]
    if names != got:
        out.append(f"components: the lock lists {', '.join(names) or 'none'}; the rebuild made {', '.join(got) or 'none'}")
    have = {c.name: c for c in rebuilt.components}
    for c in expected.components:
        r = have.get(c.name)
        if r is None:
            continue
        if r.commit != c.commit:
            out.append(f"{c.name}: rebuilt at commit {r.commit}, the lock records {c.commit}")
        for what, mine, theirs in (("wheel", r.wheel.file, c.wheel.file), ("size", r.wheel.size, c.wheel.size),
                                   ("sha256", r.wheel.sha256, c.wheel.sha256)):
            if mine != theirs:
                out.append(f"{c.name}: the rebuilt wheel has {what} {mine}, the lock records {theirs}")
    if expected.closure is not None and rebuilt.closure is not None:  # (--no-resolve resolves nothing to compare)
        out += closure_differences(expected.closure, rebuilt.closure)
    return out


def closure_differences(expected: Closure, rebuilt: Closure) -> list[str]:
    """Each dependency the rebuild resolved differently from the lock: missing, added, or another file."""
    out = []
    mine = {d.name: d for d in rebuilt.dists}
    theirs = {d.name: d for d in expected.dists}
    for name in sorted(theirs.keys() - mine.keys()):
        out.append(f"dependency {name}: the lock records {theirs[name].file}; the rebuild's closure has none")
    for name in sorted(mine.keys() - theirs.keys()):
        out.append(f"dependency {name}: the rebuild's closure has {mine[name].file}; the lock records none")
    for name in sorted(mine.keys() & theirs.keys()):
        m, t = mine[name], theirs[name]
        for what, a, b in (("version", m.version, t.version), ("file", m.file, t.file),
                           ("sha256", m.sha256, t.sha256), ("size", m.size, t.size)):
            if a != b:
                out.append(f"dependency {name}: the rebuild resolved {what} {a}, the lock records {b}")
    return out


def recipe_from_lock(lock: Lock, patches_dir: Path | Sequence[Path] | None, recipes_dir: Path | None,
                     cache_dir: Path | None = None) -> Recipe:
    """The lock's recorded recipe, after checking that the lock's parts agree: the recipe text hashes as
    recorded, every component is the one the recipe text describes (and no other), every patch still hashes
    as recorded, and each wheel present beside the lock has the recorded size and sha256. Any disagreement
    is a RecipeError (exit 2) naming each, before anything is built.

    Local patches are looked up in `patches_dir` first when given (a bundle's patches/, --patches-dir), then
    beside the recipe file that declared them, beside the recipes/ the lock names and beside the project's
    recipes; a patch or input file found in none of them is looked for under its recorded name, with the
    sha256 the lock records, in `patches_dir` and in the lock's own folder as a bundle lays it out (patches/,
    inputs/<component>/; whatever the current folder), then taken from `cache_dir` by that sha256 (every build
    keeps the files it read there), else MissingFiles names each with every place looked."""
    recorded = from_place(lock.recipe_path)  # a lock records it relative to the project root (cwd), its build
    # record (read back with it) as this machine's path; a shipped one as {shipped}/...
    bundle = Path(lock.path).resolve().parent if lock.path is not None else None
    own = (recipes_dir.parent / "patches",) if recipes_dir else patches_dirs_of(recorded)
    first = list(given_dirs(patches_dir))
    # where a recorded file is looked for by its name and sha256 before the cache: --patches-dir, then the
    # lock's folder as a bundle lays it out (patches/, inputs/<component>/)
    search = tuple(dict.fromkeys([*first, *([bundle / "patches", bundle] if bundle is not None else [])]))
    dirs = list(dict.fromkeys([*first, *own, (recipes_dir or default_recipes_dir()).parent / "patches"]))
    # each inherited key resolves against the file that declared it, as the build did (a lock written before
    # locks recorded them: against the recorded recipe's directory)
    origins = origins_from_record(dict(lock.recipe_origins), dirs, first)
    hashes = {(c.name, p.label): p.sha256 for c in lock.components for p in c.patches if not p.remote}
    hashes.update({(c.name, i.label): i.sha256 for c in lock.components for i in c.inputs})
    try:
        recipe = load_recipe_text(lock.recipe_text, lock.recipe_name, recorded, dirs,
                                  origins=origins, recorded=Recorded(hashes, cache_dir, search))
    except MissingFiles as err:
        raise MissingFiles([f"{lock.path}: {p}" for p in err.problems], hint=err.hint) from None
    except RecipeError as err:
        raise RecipeError([f"{lock.path}: the recorded recipe: {p}" for p in err.problems],
                          hint="the lock's [recipe] text is damaged; rebuild the lock from its recipe") from None
    problems = []
    recorded_sha = sha256_bytes(lock.recipe_text.encode())  # the text as recorded (whichever writer wrote it)
    if recorded_sha != lock.recipe_sha256:
        problems.append(f"recipe text has sha256 {recorded_sha}, the lock records {lock.recipe_sha256}")
    problems += component_problems(lock, recipe)
    for comp in lock.components:
        if comp.name not in {c.name for c in recipe.components}:
            continue  # (named by component_problems)
        have = {p.label: p for p in recipe.component(comp.name).patches}
        for p in comp.patches:
            if have.get(p.label) != p:
                found = have[p.label].sha256 if p.label in have else "(missing)"
                problems.append(f"{comp.name}: patch {p.label} has sha256 {found}, the lock records {p.sha256}")
    if lock.path is not None:
        problems += wheel_problems(lock, missing_ok=True)
    if problems:
        raise RecipeError([f"{lock.path}: {p}" for p in problems],
                          hint="the lock no longer matches its inputs; restore them or build the recipe anew")
    return replace(recipe, partial=lock.recipe_partial)


def component_problems(lock: Lock, recipe: Recipe) -> list[str]:
    """Where the lock's [[components]] disagree with the recipe text it embeds (as a lock records them:
    URLs and commands masked, env redacted)."""
    want = [c.name for c in recipe.components]
    got = [c.name for c in lock.components]
    out = []
    missing = [n for n in want if n not in got]
    extra = [n for n in got if n not in want]
    if missing:
        out.append(f"components: the recipe text has {', '.join(missing)}, which the lock does not list")
    if extra:
        out.append(f"components: the lock lists {', '.join(extra)}, which the recipe text does not have")
    if not missing and not extra and want != got:
        out.append(f"components: the lock lists them in the order {', '.join(got)}; the recipe's build order is "
                   f"{', '.join(want)}")
    by_name = {c.name: c for c in lock.components}
    for comp in recipe.components:
        locked = by_name.get(comp.name)
        if locked is None:
            continue
        if comp.prebuilt is not None:
            out += _prebuilt_problems(comp.name, comp.prebuilt, locked)
            continue
        recorded = {
            "url": redact_text(comp.url), "commit": comp.commit, "subdir": comp.subdir,
            "command": redact_argv(comp.command), "install-args": redact_argv(comp.install_args),
            "after": list(comp.after), "env": locked_env(component_env(recipe, comp).items()),
            "patches": [redact_text(p.label) for p in comp.patches],
            "fetchcontent": [fetchcontent_table(d) for d in comp.fetchcontent],
        }
        in_lock = {
            "url": locked.url, "commit": locked.commit, "subdir": locked.subdir, "command": list(locked.command),
            "install-args": list(locked.install_args), "after": list(locked.after), "env": dict(locked.env),
            "patches": [p.label for p in locked.patches], "fetchcontent": [dict(f) for f in locked.fetchcontent],
        }
        for key, value in recorded.items():
            if in_lock[key] != value:
                out.append(f"{comp.name}: {key} is {in_lock[key]!r} in [[components]], the recipe text says {value!r}")
    return out


def _prebuilt_problems(name: str, pre: Prebuilt, locked: LockedComponent) -> list[str]:
    """Where a lock's prebuilt component disagrees with the recipe text: not recorded as prebuilt, another
    requirement, or another file than the recipe's {url, sha256}."""
    if not locked.prebuilt:
        return [f"{name}: the recipe text says prebuilt {pre.label!r}, the lock records a build from source"]
    if pre.requirement and locked.prebuilt.get("requirement") != pre.requirement:
        return [f"{name}: the recipe text says prebuilt {pre.requirement!r}, the lock records "
                f"{locked.prebuilt.get('requirement') or locked.prebuilt.get('url')!r}"]
    if pre.sha256 and (locked.wheel.sha256 != pre.sha256 or locked.prebuilt.get("url") != redact_text(pre.url)):
        return [f"{name}: the recipe text pins {pre.url} sha256 {pre.sha256}, the lock records "
                f"{locked.prebuilt.get('url')} sha256 {locked.wheel.sha256}"]
    return []
