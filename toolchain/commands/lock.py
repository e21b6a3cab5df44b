"""`toolchain lock --lock LOCK [--refresh]`: the runtime closure of an existing lock (the same built wheels, the
recipe's [resolve]: the one kept in the cache, or resolved again with --refresh) written into stack.lock.toml and
pylock.toml; the ABI check runs first (`--audit`: over the closure's own shared objects too)."""

from __future__ import annotations

import argparse
from pathlib import Path

from toolchain.commands import options
from toolchain.console import UI, CommandResult
from toolchain.pipeline.relock import relock


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("lock", help="resolve a lock's runtime dependencies again (pinned with sha256) and rewrite it",
                       description="Resolve the runtime closure of the wheels a lock records with the [resolve] "
                                   "indexes of its recorded recipe, check it against what each compiled component "
                                   "was built against, and rewrite stack.lock.toml and pylock.toml.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--lock", type=Path, metavar="LOCK", help="the stack.lock.toml to re-resolve")
    what.add_argument("--image", metavar="REF",
                      help="instead: read back the lock and provenance an image made by `toolchain image` carries "
                           "(from podman or docker when one holds REF, else from its registry); --out DIR writes "
                           "the lock there")
    p.add_argument("--out", type=Path, metavar="DIR", help="with --image: write the image's stack.lock.toml here")
    p.add_argument("--remote-insecure", "--insecure", dest="insecure", action="store_true",
                   help="with --image: the registry speaks plain HTTP (--insecure: its older name)")
    p.add_argument("--refresh", action="store_true",
                   help="resolve again from the indexes even when the closure for these wheels' requirements and "
                        "this [resolve] is kept in the cache (without it, the kept closure is used offline)")
    p.add_argument("--audit", action="store_true",
                   help="also fetch the closure's wheels and read their shared objects (a build reads only their "
                        "file lists): each soname they need gets a verdict too, a missing one is a warning")
    options.add_recipe(p, recipe=False)
    options.add(p, "cache-dir")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, ui: UI) -> CommandResult:
    if args.image:
        return lock_of_image(args, ui)
    from toolchain.commands.build import closure_summary
    from toolchain.commands.recipes import Table

    lock = relock(args.lock, options.cache_dir(args), args.patches_dir, args.recipes_dir, ui, refresh=args.refresh,
                  audit=args.audit)
    assert lock.closure is not None
    data = {"ok": True, "lock": str(lock.path), "pylock": str(lock.path.parent / "pylock.toml") if lock.path else "",
            **closure_summary(lock)}
    table = Table(title=f"{lock.recipe_name}: {len(lock.closure.dists)} locked dependencies")
    for col in ("dependency", "version", "sha256", "from"):
        table.add_column(col, overflow="fold")
    for d in lock.closure.dists:
        table.add_row(d.name, d.version, d.sha256[:16], d.index or d.url)
    when = f" (closure resolved {lock.closure.resolved_at})" if lock.closure.resolved_at else ""
    return CommandResult(data, 0, f"[green]lock:[/] {lock.path}{when}", (table,))


def lock_of_image(args: argparse.Namespace, ui: UI) -> CommandResult:
    """`toolchain lock --image REF`: the provenance an image carries, its lock written to --out when given."""
    from toolchain.commands.recipes import Table
    from toolchain.core.fs import atomic_write_text
    from toolchain.core.owned import OWNED_MARKER, check_ours, claim
    from toolchain.image.base import plain_http
    from toolchain.image.provenance import read_provenance
    from toolchain.lock import LOCK_NAME

    if args.out:  # a folder the tool made, an empty one, or one holding a lock of yours: refused before it reads
        check_ours(args.out, "lock --out", (OWNED_MARKER, LOCK_NAME), removing=False)
    with ui.status(f"reading the provenance of {args.image}"):
        found = read_provenance(args.image, options.cache_dir(args) / "images" / "work",
                                insecure=args.insecure or plain_http(args.image.split("/", 1)[0]))
    data = {"ok": True, "image": args.image, "where": found.where, "digest": found.digest, "image-id": found.image_id,
            "labels": found.labels, "components": found.components, "lock-text": found.lock_text}
    if args.out:
        claim(args.out, "lock --out", (OWNED_MARKER, LOCK_NAME), removing=False)
        atomic_write_text(args.out / LOCK_NAME, found.lock_text)
        data["lock"] = str(args.out / "stack.lock.toml")
    table = Table(title=f"{args.image}: {found.labels.get('vnd.xpu-toolchain.recipe', '?')}")
    for col in ("component", "commit"):
        table.add_column(col, overflow="fold")
    for name, commit in found.components.items():
        table.add_row(name, commit)
    return CommandResult(data, 0, f"[green]lock:[/] {data.get('lock', found.where)} (image {found.named})",
                         (table,))
