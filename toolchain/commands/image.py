"""`toolchain image --lock LOCK --tag NAME[:TAG] [--base IMAGE@DIGEST] [--load podman|docker] [--push]
[--oci-dir DIR]`: an OCI image of the lock's base plus one layer with the lock's wheels, reproducible from the
lock alone (toolchain/image/)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.commands import options
from toolchain.console import UI, CommandResult

if TYPE_CHECKING:
    from toolchain.image.deliver import PipedLoad, Ref


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("image", help="turn a lock into a runnable, reproducible OCI image",
                       description="An OCI image of the lock's base image (pinned by digest) plus ONE layer that "
                                   "installs the lock's wheels and closure as `pip install --force-reinstall "
                                   "--no-deps` would into the base's interpreter; the same lock and base give the "
                                   "same digest anywhere. The lock is inside at /usr/share/toolchain/stack.lock.toml.")
    p.add_argument("--lock", type=Path, required=True, metavar="LOCK", help="the stack.lock.toml to install")
    add_image_options(p)
    options.add(p, "cache-dir", help={"cache-dir": "where the lock's wheels are taken from when they are not beside "
                                                   "it (the cache of the build that made them), and where the base's "
                                                   "layout and the image's layer are kept (default: "
                                                   "$TOOLCHAIN_CACHE_DIR or ~/.cache/xpu-toolchain)"})
    p.set_defaults(handler=handle)


def add_image_options(p: argparse.ArgumentParser) -> None:
    """The options `image` and `build --image` share (every one but --lock)."""
    p.add_argument("--tag", required=p.prog.endswith("image"), metavar="NAME[:TAG]",
                   help="the image's name (HOST[:PORT]/NAME[:TAG] to --push)")
    p.add_argument("--base", metavar="IMAGE@sha256:DIGEST",
                   help="the base image for a lock that records none (an overlay lock's base is its own)")
    p.add_argument("--python", metavar="PATH", help="the base's interpreter (default: the lock's [target] python)")
    p.add_argument("--engine", choices=("podman", "docker"), default="podman",
                   help="the engine that holds (or pulls) the base image and runs its interpreter, to read it and "
                        "compile the layer's modules (default podman)")
    p.add_argument("--load", choices=("podman", "docker"),
                   help="load the image into this local engine, named --tag")
    p.add_argument("--push", action="store_true", help="push the image to the registry its tag names")
    p.add_argument("--remote-insecure", "--insecure", dest="insecure", action="store_true",
                   help="the registries of the base and of --push speak plain HTTP (a trusted private one; "
                        "--insecure: its older name)")
    p.add_argument("--oci-dir", type=Path, metavar="DIR",
                   help="write the image as an OCI image layout here (a new or empty folder, or one toolchain "
                        "wrote, which is replaced)")
    p.add_argument("--no-bytecode", action="store_true",
                   help="leave the layer's modules uncompiled (default: .pyc compiled by the base's Python, "
                        "unchecked-hash, so a container start compiles nothing)")


def handle(args: argparse.Namespace, ui: UI) -> CommandResult:
    if not (args.oci_dir or args.load or args.push):  # (made, then kept nowhere: said before anything is made)
        from toolchain.errors import UsageError

        raise UsageError("toolchain image delivers the image nowhere: pass --load podman|docker (into a local "
                         "engine), --push (to the registry its --tag names) or --oci-dir DIR (an OCI layout)",
                         hint="e.g. toolchain image --lock LOCK --tag NAME --load podman")
    return CommandResult(*image_and_deliver(args.lock, args, ui))


def image_and_deliver(lock: Path, args: argparse.Namespace, ui: UI) -> tuple[dict[str, Any], int, str]:
    """Make the image of `lock` and deliver it where `args` say; (the --json document, exit code, summary)."""
    from toolchain.image.deliver import PipedLoad, oci_dir, parse_ref

    ref = parse_ref(args.tag)
    if args.oci_dir:
        oci_dir(args.oci_dir)  # refused before anything is made: a folder the tool did not make is never replaced
    early = PipedLoad("podman", options.cache_dir(args) / "images" / "work") if args.load == "podman" else None
    # (podman starts while the image is made)
    try:
        return _image_and_deliver(lock, args, ui, ref, early)
    finally:
        if early is not None:
            early.close()  # (not fed, the image not made: podman read an empty archive and loaded nothing)


def _image_and_deliver(lock: Path, args: argparse.Namespace, ui: UI, ref: Ref,
                       early: PipedLoad | None) -> tuple[dict[str, Any], int, str]:
    from toolchain.core import toml as tomlio
    from toolchain.image.assemble import A
    from toolchain.image.base import plain_http
    from toolchain.image.deliver import load, push, to_oci_dir
    from toolchain.image.make import make_image

    cache = options.cache_dir(args)
    with tomlio.parses_remembered(cache / "memo"):  # (a warm image parses no TOML: the lock read back as JSON)
        image = make_image(lock, cache, ui, base=args.base, engine=args.engine, python=args.python,
                           insecure=args.insecure or plain_http((args.base or "").split("/", 1)[0]),
                           bytecode=not getattr(args, "no_bytecode", False))
    data: dict[str, Any] = {"ok": True, "image": ref.name, "digest": image.digest, "config": image.config_digest,
                            "layer": {"digest": image.layer.digest, "size": image.layer.size,
                                      "diff-id": image.layer.diff_id, "entries": image.layer.entries,
                                      "whiteouts": list(image.layer.whiteouts)},
                            "base": image.base.name, "labels": image.labels,
                            "bytecode": image.labels.get(A + "bytecode", "")}
    work = cache / "images" / "work"
    if args.oci_dir:
        data["oci-dir"] = str(to_oci_dir(image, args.oci_dir, ref))
    if args.load:
        with ui.status(f"loading {ref.name} into {args.load}"):
            data["loaded"] = {"engine": args.load, "name": load(image, args.load, ref, work, early)}
    if args.push:
        with ui.status(f"pushing {ref.name}"):
            pushed, sent = push(image, ref, work, insecure=args.insecure or plain_http(ref.host))
        data["pushed"] = {"name": pushed, "uploaded-bytes": sent}
    where = ", ".join(x for x in (data.get("oci-dir", ""), args.load or "", "pushed" if args.push else "") if x)
    return data, 0, f"[green]image:[/] {ref.name}@{image.digest}" + (f" ({where})" if where else "")
