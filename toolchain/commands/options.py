"""The options more than one command takes, each declared once, as data (after nox's `_options.py`).

Global options (`--json`, `-v`) are accepted before the command and after it; `merge` says how the two
values combine (`toolchain -v build` and `toolchain build -v` are the same). Shared options (`--recipe`,
`--cache-dir`, `--out`, ...) are added to a command's parser by name (`add(parser, "recipe", "cache-dir")`);
`finalize` turns the parsed value into what the command uses (the cache directory is resolved here and
nowhere else) and refuses a value that cannot work, naming the flag.
"""

from __future__ import annotations

import argparse
import operator
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.core.record import field, record

if TYPE_CHECKING:
    from toolchain.recipe.load import Recipe
    from toolchain.sharing.settings import RemoteRequest

DEFAULT_RECIPE = "demo"
COMMAND_SUFFIX = "@command"  # where a global option given after the command is parsed to, before the merge


@record
class Option:
    """One command-line option: its argparse flags and settings, shared by the commands that take it."""

    dest: str
    flags: tuple[str, ...]
    help: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    merge: Callable[[Any, Any], Any] | None = None      # global: (before the command, after it) -> value
    finalize: Callable[[Any, str], Any] | None = None   # (parsed value, flag) -> the value commands use

    @property
    def flag(self) -> str:
        return self.flags[-1]


def _existing_dir_or_new(value: Path | None, flag: str) -> Path | None:
    """A directory that exists or can be made: not a file, nor under one."""
    if value is None:
        return None
    from toolchain.core.fs import check_dir

    path = Path(value).expanduser().resolve()
    check_dir(path, flag, writable=False)
    return path


def _at_least_one(value: int | None, flag: str) -> int | None:
    if value is not None and value < 1:
        from toolchain.errors import UsageError

        raise UsageError(f"{flag} {value}: give a number of builds, at least 1", hint=f"{flag} 1 builds one at a time")
    return value


def resolve_cache_dir(value: Path | str | None, flag: str = "--cache-dir") -> Path:
    """The cache directory: the one given, else $TOOLCHAIN_CACHE_DIR, else ~/.cache/xpu-toolchain; when the
    trust rule refuses it, the run's private folder in its place (`core.trust.cache_root`)."""
    from toolchain.core.owned import protected
    from toolchain.core.trust import cache_for_run, default_cache_dir

    named = Path(value).expanduser() if value else default_cache_dir()
    why = protected(named, mounts=False, current=False)
    if why:  # (what lies there in a cache's shape is not known to be the tool's: never written, pruned or read)
        import os

        from toolchain.errors import UsageError

        real = os.path.realpath(named)  # (a link, or a path through one: named as given, and where it leads)
        shown = f"{named} (a link to {real})" if real != os.path.abspath(named) else str(named)
        raise UsageError(f"cache folder {shown}: {why}, never a cache; nothing was read, written or pruned there",
                         hint=f"a cache is a folder of its own: pass {flag} the folder your builds use "
                              "(default ~/.cache/xpu-toolchain), or a new one")
    path = _existing_dir_or_new(cache_for_run(named), flag)  # (core.trust.cache_root of the folder named)
    assert path is not None
    return path


GLOBAL: tuple[Option, ...] = (
    Option("json", ("--json",), "print one JSON document on stdout, and nothing else there",
           {"action": "store_true"}, merge=operator.or_),
    Option("verbose", ("-v", "--verbose"), "stream the output of builds and tests to stderr",
           {"action": "store_true"}, merge=operator.or_),
    Option("progress_interval", ("--progress-interval",),
           "when stderr is not a terminal (a CI log): a line on each running build every SECONDS "
           "(default: 30; 0: none)", {"type": float, "metavar": "SECONDS", "default": None},
           merge=lambda before, after: after if after is not None else before),
)

SHARED: dict[str, Option] = {o.flag.lstrip("-"): o for o in (
    Option("recipe", ("--recipe",), f"a recipe name (your recipes, then the shipped ones) or a path to a .toml "
                                    f"file (default: {DEFAULT_RECIPE})"),
    Option("recipes_dir", ("--recipes-dir",),
           "your recipes: a recipe's name (given, or in `extends`) is looked up beside the recipe naming it, then "
           "here, then in the shipped recipes (default: $TOOLCHAIN_RECIPES_DIR, else ./recipes)", {"type": Path, "metavar": "DIR"}),
    Option("patches_dir", ("--patches-dir",),
           "a folder of patches searched first (then patches/ beside the recipe, else beside its recipes/, and "
           "the folders inherited patches come from: none is removed); for a recipe read from a lock (`build "
           "--from-lock`, a lock given), where its patches and input files moved to (searched by their recorded "
           "names and sha256). Repeatable: searched in the order given",
           {"type": Path, "metavar": "DIR", "action": "append"}),
    Option("cache_dir", ("--cache-dir",),
           "mirrors, source trees and wheels (default: $TOOLCHAIN_CACHE_DIR or ~/.cache/xpu-toolchain)",
           {"type": Path, "metavar": "DIR"}, finalize=resolve_cache_dir),
    Option("mirror", ("--mirror",), "rewrite repository URLs starting with FROM to start with TO (repeatable)",
           {"action": "append", "default": [], "metavar": "FROM=TO"}),
    Option("out", ("--out",), "output directory", {"type": Path, "metavar": "DIR"},
           finalize=_existing_dir_or_new),
    # the remote wheel cache on an OCI registry (build/remotecache.py)
    Option("remote_cache", ("--remote-cache",),
           "oci://HOST[:PORT]/NAMESPACE: look wheels up there before building (default: $TOOLCHAIN_REMOTE_CACHE, "
           "else the recipe's [cache] remote; `none` turns it off)", {"metavar": "URL"}),
    Option("push", ("--push",), "upload the wheels this build makes (or has cached) to the remote cache; a "
           "push that cannot be done fails the build (exit 1) unless --push=best-effort (then: a warning)",
           {"nargs": "?", "const": "required", "default": None, "choices": ("required", "best-effort"),
            "metavar": "best-effort"}),
    Option("remote_insecure", ("--remote-insecure",),
           "the remote cache's host speaks plain HTTP (only for a registry you trust)", {"action": "store_true"}),
    Option("no_compiler_cache", ("--no-compiler-cache",),
           "compile without ccache (default: every compiled component builds through ccache)",
           {"action": "store_true"}),
    Option("no_resolve", ("--no-resolve",),
           "do not resolve the runtime dependencies (offline; the lock then pins none of them)",
           {"action": "store_true"}),
    Option("builds_at_once", ("--builds-at-once",),
           "compile at most N components at once (default: as many as the target's cores and the memory "
           "their compile jobs are budgeted allow; 1: one after another)",
           {"type": int, "metavar": "N"}, finalize=_at_least_one),
)}


# the options that find recipes and their patches: every command that takes --recipe (or rebuilds a lock's
# recipe) takes them all, through `add_recipe`
FIND_RECIPES = ("recipes-dir", "patches-dir")


def add_recipe(parser: argparse.ArgumentParser, recipe_group: argparse._ActionsContainer | None = None, *,
               recipe: bool = True, patches: bool = True, help: Mapping[str, str] | None = None) -> None:
    """--recipe (into `recipe_group` when given: a mutually exclusive group, say) and the options that find
    recipes; `recipe=False` for a command that reads its recipe from a lock, `patches=False` for one that
    reads no patch (it takes no --patches-dir; the recipe is read with the recorded folders)."""
    if recipe:
        add(recipe_group if recipe_group is not None else parser, "recipe", help=help)
    add(parser, *(FIND_RECIPES if patches else tuple(n for n in FIND_RECIPES if n != "patches-dir")), help=help)
    if not patches:
        o = SHARED["patches-dir"]
        parser.set_defaults(**{o.dest: o.kwargs.get("default")})


def add_global(parser: argparse.ArgumentParser, *, command: bool) -> None:
    """Global options; on a command's parser they are parsed aside and merged by `finish`."""
    group = parser.add_argument_group("global options") if command else parser
    for o in GLOBAL:
        dest = o.dest + COMMAND_SUFFIX if command else o.dest
        group.add_argument(*o.flags, dest=dest, help=o.help, **o.kwargs)


def add(parser: argparse._ActionsContainer, *names: str, help: Mapping[str, str] | None = None) -> None:
    """Add shared options by flag name (without the dashes) to a parser or an argument group; `help`
    rewords an option for a command whose use of it differs (its default, say)."""
    for name in names:
        o = SHARED[name]
        parser.add_argument(*o.flags, dest=o.dest, help=(help or {}).get(name, o.help), **o.kwargs)


def finish(args: argparse.Namespace) -> argparse.Namespace:
    """Merge each global option's two values and finalize the shared options the command took."""
    for o in GLOBAL:
        if o.merge is None:
            continue
        aside = o.dest + COMMAND_SUFFIX
        default = o.kwargs.get("default", False)
        setattr(args, o.dest, o.merge(getattr(args, o.dest, default), getattr(args, aside, default)))
        if hasattr(args, aside):
            delattr(args, aside)
    for o in SHARED.values():
        if o.finalize is not None and hasattr(args, o.dest):
            setattr(args, o.dest, o.finalize(getattr(args, o.dest), o.flag))
    return args


def option_strings(parsers: Iterable[argparse.ArgumentParser]) -> list[str]:
    return sorted({s for p in parsers for a in p._actions for s in a.option_strings if s.startswith("--")})


# ---- what the build commands share -------------------------------------------------------------------------

def remote_request(args: argparse.Namespace) -> RemoteRequest:
    """--remote-cache, --push and --remote-insecure as the build stage takes them (build/remotecache.py)."""
    from toolchain.sharing.settings import RemoteRequest

    return RemoteRequest(url=getattr(args, "remote_cache", None), push=True if getattr(args, "push", None) else None,
                         insecure=getattr(args, "remote_insecure", False))


def cache_dir(args: argparse.Namespace) -> Path:
    return resolve_cache_dir(args.cache_dir)


def recipe_from_args(args: argparse.Namespace, *, pinned: bool = True) -> Recipe:
    from toolchain.recipe.load import load_recipe

    return load_recipe(args.recipe or DEFAULT_RECIPE, args.recipes_dir, args.patches_dir, pinned=pinned)
