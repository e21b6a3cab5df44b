"""`toolchain cache ls [--remote [URL]] [--component C]`: what the wheel caches hold.
`toolchain cache prune --remote [URL] [--older-than AGE] [--keep N] [--dry-run]`: keep the registry to a window.
`toolchain cache prune [--older-than AGE] [--keep-size SIZE] [--dry-run]`: the same for the local cache.

Without --remote: the local wheel cache (--cache-dir). With --remote: the team's OCI registry (the URL given,
else $TOOLCHAIN_REMOTE_CACHE, else the [cache] remote of --recipe), read from the entries' annotations without
downloading a wheel: which commits of a component are there to download instead of compiling.

`prune` deletes the remote entries a retention rule names through the registry API (DELETE of each manifest;
the registry needs deletes enabled, and frees the blobs when its garbage collector runs): `--keep N` keeps
each component's N newest, `--older-than 30d` removes, of the rest, what was stored before 30 days ago (both:
what is older and not among the N newest). `--dry-run` lists what would go and deletes nothing. A registry
that refuses deletes (HTTP 405) is exit 1 with what to change; a rule that is not understood is exit 2.
Without --remote, `prune` evicts local entries (build/localprune.py `prune_local`): `--keep-size 20GiB` keeps the
newest up to that total, `--older-than` as above; a symbolic link in the cache is named and never followed.
The link cache (`<cache>/links`) is pruned by the same rule, kept to SIZE on its own, its files dated by their
last use (build/linkprune.py `prune_links`).
It also removes the private cache folders killed runs left in the temporary folder (core/trust.py
`reap_stand_ins`: only this user's, marked by the tool, whose run has ended).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.commands import options
from toolchain.console import UI, CommandResult, Grid
from toolchain.errors import UsageError

if TYPE_CHECKING:
    from toolchain.build.linkprune import LinksPruned


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("cache", help="list what the local or the remote wheel cache holds; prune either",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="cache_action", metavar="ACTION", parser_class=type(p))
    ls = actions.add_parser("ls", help="list cache entries (newest last)", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_global(ls, command=True)
    ls.add_argument("--remote", nargs="?", const="", default=None, metavar="URL",
                    help="list the remote cache: oci://HOST[:PORT]/NAMESPACE (default: $TOOLCHAIN_REMOTE_CACHE, "
                         "else the [cache] remote of --recipe)")
    options.add_recipe(ls, patches=False, help={"recipe": "the recipe whose [cache] remote to list (with --remote and no URL)"})
    options.add(ls, "remote-insecure", "cache-dir")
    ls.add_argument("--component", help="only this component's entries")
    ls.set_defaults(handler=cmd_ls)
    prune = actions.add_parser("prune", help="delete old entries of the local or the remote wheel cache "
                                             "(a retention rule)",
                               description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_global(prune, command=True)
    prune.add_argument("--remote", nargs="?", const="", default=None, metavar="URL",
                       help="the remote cache to prune: oci://HOST[:PORT]/NAMESPACE (default: $TOOLCHAIN_REMOTE_CACHE, "
                            "else the [cache] remote of --recipe); without it the local cache (--cache-dir) is pruned")
    options.add_recipe(prune, patches=False, help={"recipe": "the recipe whose [cache] remote to prune (with --remote and no URL)"})
    options.add(prune, "remote-insecure", "cache-dir")
    prune.add_argument("--older-than", metavar="AGE", help="remove entries stored before now - AGE (30d, 12h, 2w)")
    prune.add_argument("--keep", type=int, metavar="N", help="keep the N newest entries of each component (remote)")
    prune.add_argument("--keep-size", metavar="SIZE", help="keep the newest local entries up to SIZE in all "
                       "(10GiB, 500M), and the link cache's most recently used up to SIZE too; with --older-than an "
                       "entry goes when it is older and beyond SIZE (local)")
    prune.add_argument("--component", help="only this component's entries")
    prune.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    prune.set_defaults(handler=cmd_prune)
    p.set_defaults(handler=lambda args, ui: _usage())


def _usage() -> CommandResult:
    raise UsageError("say what to do with the cache: `toolchain cache ls [--remote [URL]]` or "
                     "`toolchain cache prune --remote [URL] --older-than AGE`",
                     hint="see `toolchain cache ls --help`, `toolchain cache prune --help`")


def cmd_ls(args: argparse.Namespace, ui: UI) -> CommandResult:
    if args.remote is None:
        if args.remote_insecure or args.recipe:
            raise UsageError("--remote-insecure and --recipe go with --remote")
        cache_dir = _local_cache(args, "listed")
        rows = local_entries(cache_dir, args.component or "", ui.warn)
        where = str(cache_dir)
    else:
        from toolchain.sharing.registry import Registry

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


def cmd_prune(args: argparse.Namespace, ui: UI) -> CommandResult:
    from toolchain.sharing.retention import prune

    if args.remote is None:
        return _prune_local(args, ui)
    if args.keep_size is not None:
        raise UsageError("--keep-size is for the local cache (without --remote); the remote one keeps --keep N "
                         "entries per component")
    older_than, _ = _rule(args.older_than, "--keep N (per component)", args.keep, int,
                          "--remote --older-than 30d --keep 3")
    if args.keep is not None and args.keep < 0:
        raise UsageError(f"--keep {args.keep}: give a number of entries per component, 0 or more")
    from toolchain.sharing.registry import Registry

    settings = _settings(args, "prune")
    done = prune(Registry(settings), component=args.component or "", older_than=older_than, keep=args.keep,
                 dry_run=args.dry_run, status=ui.status)
    rows = {e.key: e.to_dict() for e in done.entries}
    removed = [{**rows[v.entry.key], "why": v.why} for v in done.verdicts if v.remove]
    data = {"ok": True, "where": settings.url, "dry-run": args.dry_run, "older-than": args.older_than,
            "keep": args.keep, "removed": removed,
            "kept": [{**rows[v.entry.key], "why": v.why} for v in done.verdicts if not v.remove],
            "manifests-deleted": done.deleted}
    verb = "would remove" if args.dry_run else "removed"
    table = Grid(f"remote wheel cache: {settings.url}: {verb}", ("component", "commit", "stored", "key", "why"),
                 tuple((r["component"], r["commit"][:12], r["created"], r["key"][:16], r["why"])
                       for r in removed))
    total = len(done.verdicts)
    summary = f"{verb} {len(removed)} of {total} entr{'y' if total == 1 else 'ies'}, kept {total - len(removed)}"
    if done.deleted:
        summary += " (the registry frees their blobs when its garbage collector runs)"
    return CommandResult(data, 0, summary, (table,) if removed else ())


def _rule(older_than: str | None, keep_flag: str, keep: Any, parse_keep: Callable[[Any], Any],
          example: str) -> tuple[float | None, Any]:
    """A prune's rule from its options: --older-than AGE in seconds and the keep option parsed (None: not given);
    neither given, or one not understood: a usage error (exit 2) with an example."""
    from toolchain.sharing.retention import parse_age

    if older_than is None and keep is None:
        raise UsageError(f"say what to keep: --older-than AGE (e.g. 30d), {keep_flag}, or both",
                         hint=f"toolchain cache prune {example} --dry-run")
    try:
        return (parse_age(older_than) if older_than is not None else None,
                parse_keep(keep) if keep is not None else None)
    except ValueError as exc:
        raise UsageError(f"--older-than / {keep_flag.split(maxsplit=1)[0]}: {exc}",
                         hint=f"toolchain cache prune {example} --dry-run") from None


def _link_counts(links: LinksPruned) -> dict[str, int]:
    """The link cache's verdicts counted for --json: `removed`/`kept` links, `hashes-removed`/`hashes-kept`."""
    counts = dict.fromkeys(("removed", "kept", "hashes-removed", "hashes-kept"), 0)
    for f, gone, _ in links.verdicts:
        counts[("hashes-" if f.kind == "hash" else "") + ("removed" if gone else "kept")] += 1
    return counts


def _prune_local(args: argparse.Namespace, ui: UI) -> CommandResult:
    """`cache prune` without --remote: the local wheel cache's entries by age and total size."""
    from toolchain.build.localprune import prune_local
    from toolchain.recipe.buildspec import parse_size

    if args.keep is not None or args.remote_insecure or args.recipe or args.component:
        raise UsageError("--keep, --component, --recipe and --remote-insecure go with --remote",
                         hint="the local cache keeps by age and size: toolchain cache prune --older-than 30d "
                              "--keep-size 20GiB --dry-run")
    older_than, keep_size = _rule(args.older_than, "--keep-size SIZE (e.g. 20GiB)", args.keep_size, parse_size,
                                  "--older-than 30d --keep-size 20GiB")
    cache_dir = _local_cache(args, "pruned")
    from toolchain.core.trust import reap_stand_ins

    left = [str(p) for p in reap_stand_ins(dry_run=args.dry_run)]  # (private caches of killed runs)
    done = prune_local(cache_dir, older_than=older_than, keep_size=keep_size, dry_run=args.dry_run, warn=ui.warn)
    for link in done.refused:
        ui.warn(f"{link} is a symbolic link: not followed, nothing under it removed")
    from toolchain.build.ccache import LINKS_DIR
    from toolchain.build.linkprune import prune_links

    links = prune_links(cache_dir / LINKS_DIR, older_than=older_than, keep_size=keep_size, dry_run=args.dry_run)
    for folder in links.refused:
        ui.warn(f"{folder} is a symbolic link or not a folder of yours: not entered, nothing in it removed")

    def row(entry: Any, why: str) -> dict[str, Any]:
        return {"key": entry.key, "component": entry.component, "wheel": entry.wheel, "size": entry.size,
                "stored": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(entry.stored)), "why": why}

    removed = [row(e, why) for e, gone, why in done.verdicts if gone]
    data = {"ok": True, "where": str(cache_dir), "remote": False, "dry-run": args.dry_run,
            "older-than": args.older_than, "keep-size": args.keep_size, "removed": removed,
            "kept": [row(e, why) for e, gone, why in done.verdicts if not gone], "bytes-freed": done.freed,
            "links-not-followed": list(done.refused), "private-caches-removed": left,
            "link-cache": {**_link_counts(links), "bytes-freed": links.freed,
                           "temporaries-removed": links.temporaries, "not-entered": list(links.refused)}}
    verb = "would remove" if args.dry_run else "removed"
    table = Grid(f"local wheel cache: {cache_dir}: {verb}", ("component", "size", "stored", "key", "why"),
                 tuple((r["component"], _size(r["size"]), r["stored"], r["key"][:16], r["why"]) for r in removed))
    total = len(done.verdicts)
    summary = (f"{verb} {len(removed)} of {total} entr{'y' if total == 1 else 'ies'}, kept {total - len(removed)}"
               + (f", {_size(done.freed)} freed" if done.freed else "")
               + (f"; link cache: {verb} {data['link-cache']['removed']} of "
                  f"{data['link-cache']['removed'] + data['link-cache']['kept']} links"
                  + (f", {_size(links.freed)} freed" if links.freed else "") if links.verdicts else "")
               + (f"; {verb} {len(left)} private cache folder{'' if len(left) == 1 else 's'} of killed runs: "
                  + ", ".join(left) if left else ""))
    return CommandResult(data, 0, summary, (table,) if removed else ())


def _local_cache(args: argparse.Namespace, verb: str) -> Path:
    """The local cache `cache ls` lists or `cache prune` prunes (`verb`: "listed", "pruned"): refused (exit 2,
    nothing read or touched) when the trust rule refuses it (the run's private, empty cache stands in for it:
    listing or pruning that would say nothing of the cache named). The root or a home folder is refused for
    every command where the option is resolved (`options.resolve_cache_dir`)."""
    from toolchain.core.trust import stands_in_for

    cache_dir = _cache_dir(args)  # (resolved as the option is: the private folder when the cache is untrusted)
    untrusted = stands_in_for(cache_dir)
    if untrusted is not None:
        from toolchain.core.group import SHARED_GROUP_ENV

        raise UsageError(f"cache folder {untrusted[0]} is not trusted ({untrusted[1]}): nothing was {verb}",
                         hint="a cache holds only the tool's folders, yours alone: move anything else out of it "
                              f"and `chmod -R go-w {untrusted[0]}; chown -R $USER {untrusted[0]}`, or declare it "
                              f"shared with one group (${SHARED_GROUP_ENV})")
    return cache_dir


def _settings(args: argparse.Namespace, verb: str = "list") -> Any:
    from toolchain.recipe.cachespec import CacheSpec
    from toolchain.sharing.settings import RemoteRequest, resolve_settings

    spec = CacheSpec()
    if args.recipe:
        spec = options.recipe_from_args(args, pinned=False).cache
    settings = resolve_settings(spec, RemoteRequest(url=args.remote or None, insecure=args.remote_insecure))
    if settings is None:
        raise UsageError(f"no remote cache to {verb}",
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
        if component and meta.component != component:
            continue
        stored = meta.stored
        rows.append({"key": meta_file.parent.name, "component": meta.component, "commit": meta.commit,
                     "describe": meta.describe, "wheel": meta.wheel, "sha256": meta.sha256, "size": meta.size,
                     "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stored)) if stored else "",
                     "from": "remote" if meta.remote else "built"})
    return sorted(rows, key=lambda r: (r["created"], r["key"]))


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"
