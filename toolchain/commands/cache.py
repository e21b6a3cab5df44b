"""`toolchain cache ls [--remote [URL]] [--component C]`: what the wheel caches hold.

Without --remote: the local wheel cache (--cache-dir). With --remote: the team's OCI registry (the URL given,
else $TOOLCHAIN_REMOTE_CACHE, else the [cache] remote of --recipe), read from the entries' annotations without
downloading a wheel: which commits of a component are there to download instead of compiling.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolchain.commands import options
from toolchain.console import UI, CommandResult, Grid
from toolchain.errors import UsageError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("cache", help="list what the local or the remote wheel cache holds",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="cache_action", metavar="ACTION", parser_class=type(p))
    ls = actions.add_parser("ls", help="list cache entries (newest last)", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_global(ls, command=True)
    ls.add_argument("--remote", nargs="?", const="", default=None, metavar="URL",
                    help="list the remote cache: oci://HOST[:PORT]/NAMESPACE (default: $TOOLCHAIN_REMOTE_CACHE, "
                         "else the [cache] remote of --recipe)")
    options.add_recipe(ls, help={"recipe": "the recipe whose [cache] remote to list (with --remote and no URL)"})
    options.add(ls, "remote-insecure", "cache-dir")
    ls.add_argument("--component", help="only this component's entries")
    ls.set_defaults(handler=cmd_ls)
    p.set_defaults(handler=lambda args, ui: _usage())


def _usage() -> CommandResult:
    raise UsageError("say what to do with the cache: `toolchain cache ls [--remote [URL]]`",
                     hint="see `toolchain cache ls --help`")


def cmd_ls(args: argparse.Namespace, ui: UI) -> CommandResult:
    if args.remote is None:
        if args.remote_insecure or args.recipe:
            raise UsageError("--remote-insecure and --recipe go with --remote")
        rows = local_entries(_cache_dir(args), args.component or "", ui.warn)
        where = str(_cache_dir(args))
    else:
        from toolchain.build.remote import Registry

        settings = _settings(args)
        with ui.status(f"reading {settings.url}"):
            rows = [e.to_dict() for e in Registry(settings).entries(args.component or "")]
        where = settings.url
    data = {"ok": True, "where": where, "remote": args.remote is not None, "entries": rows}
    table = Grid(f"{'remote' if args.remote is not None else 'local'} wheel cache: {where}"
                 + (f" ({args.component})" if args.component else ""),
                 ("component", "commit", "describe", "size", "stored", "key", "wheel"),
                 tuple((r["component"], r["commit"][:12], r["describe"], _size(r["size"]), r["created"],
                        r["key"][:16], r["wheel"]) for r in rows))
    return CommandResult(data, 0, f"{len(rows)} entr{'y' if len(rows) == 1 else 'ies'}", (table,))


def _settings(args: argparse.Namespace) -> Any:
    from toolchain.build.remotespec import RemoteRequest, resolve_settings
    from toolchain.recipe.cachespec import CacheSpec

    spec = CacheSpec()
    if args.recipe:
        spec = options.recipe_from_args(args, pinned=False).cache
    settings = resolve_settings(spec, RemoteRequest(url=args.remote or None, insecure=args.remote_insecure))
    if settings is None:
        raise UsageError("no remote cache to list",
                         hint="pass --remote oci://HOST[:PORT]/NAMESPACE, set $TOOLCHAIN_REMOTE_CACHE, or "
                              "--recipe R whose [cache] remote is set")
    return settings


def _cache_dir(args: argparse.Namespace) -> Path:
    return options.cache_dir(args)


def local_entries(cache_dir: Path, component: str = "", warn: Callable[[str], None] | None = None
                  ) -> list[dict[str, Any]]:
    """The local cache's entries, as `cache ls` shows them (same fields as a remote entry). A malformed
    entry is skipped with a warning naming it (the next build that needs it evicts and rebuilds it)."""
    from toolchain.build.cache import read_meta

    rows = []
    for entry in sorted((cache_dir / "wheels").glob("??/*")):
        if entry.name.startswith(".") or not entry.is_dir():  # a write or an eviction under way
            continue
        meta_file = entry / "entry.json"
        problem, meta = read_meta(meta_file)
        if meta is None:
            if warn is not None:
                warn(f"skipping the wheel cache entry {meta_file.parent}: {problem} (the next build that needs "
                     "it evicts and rebuilds it)")
            continue
        if component and meta.get("component") != component:
            continue
        stored = meta.get("stored")
        rows.append({"key": meta_file.parent.name, "component": meta.get("component", ""),
                     "commit": meta.get("commit", ""), "describe": meta.get("describe", ""),
                     "wheel": meta.get("wheel", ""), "sha256": meta.get("sha256", ""), "size": meta.get("size", 0),
                     "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stored)) if stored else "",
                     "from": "remote" if meta.get("remote") else "built"})
    return sorted(rows, key=lambda r: (r["created"], r["key"]))


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"
