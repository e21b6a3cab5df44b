"""`toolchain bisect`: which commit of a component, or which change between two locks, broke the stack.

    toolchain bisect --recipe R --component C --good SHA [--bad SHA] (--test smoke | --test-cmd CMD)
    toolchain bisect --good-lock OLD --bad-lock NEW (--test smoke | --test-cmd CMD)
    toolchain bisect --resume [--state FILE]

First both given ends are built and tested (cached builds cost nothing): good must test good and bad must
test bad, else the bisect stops with exit 2 naming the end (--no-check-endpoints skips this). Each step then
builds the stack with one candidate (a commit of the component, or the good lock with some of the
differences to the bad one applied); components that did not change come from the wheel cache. The
candidates are the commits that change the component's subdirectory (its tree): the commits between them
build the same sources and share their verdict (--every-commit: every first-parent commit). Then the
step is tested: by the smoke regression set, or by a command.

The test command's contract: exit 0 is good; 125 is skip (this one cannot be tested); 1-124 is bad; 126 or
127 (the test could not run) and 128 or more (killed by a signal) stop the bisect with the test's last
lines: `git bisect run` counts 126/127 as bad, so a typo in the test would blame a commit. It gets
$TOOLCHAIN_BISECT_WHEELS (the step's wheel files, joined by ':'), $TOOLCHAIN_BISECT_WHEEL_DIR (a folder
holding exactly the step's wheels), $TOOLCHAIN_BISECT_LOCK (the step's lock: it pins the runtime closure only
with --test-needs-closure; otherwise closures are resolved off the critical path, for the last good and first
bad locks) and $TOOLCHAIN_BISECT_COMMIT (the commit, in a commit bisect). Every verdict, with the test's last 20 lines and its log, is in
OUT/result.json and --json.

A build that fails is a skip, remembered (with its cause) so a repeated bisect does not build it again;
--retry-unbuildable builds those again. A failure of the surroundings (the network, a full disk, a build
killed by a signal) is never remembered: the bisect stops with the cause. Ctrl-C stops the bisect too;
`--resume` (or the same command again) continues it where it stopped. A configuration error (a bad
option, a test that cannot run, an end that does not test as given) is final: fix it and start again.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from rich.markup import escape

from toolchain.bisect.session import DEFAULT_JOBS, DEFAULT_OUT, BisectOptions, default_state, run_bisect
from toolchain.bisect.state import STATE_NAME
from toolchain.bisect.testers import CONTRACT, ENVIRONMENT
from toolchain.commands import options as shared
from toolchain.commands import smoke as smoke_command
from toolchain.console import UI, CommandResult
from toolchain.core.record import replace
from toolchain.errors import UsageError
from toolchain.recipe.load import recipe_path
from toolchain.sources.mirrors import parse_rewrites


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bisect", help="find the commit or lock change that broke the stack",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    one = p.add_argument_group("one component's commits")
    shared.add_recipe(p, one)
    one.add_argument("--component", help="the component whose commits are bisected")
    one.add_argument("--good", help="a commit known to work")
    one.add_argument("--bad", help="a commit known to fail (default: the recipe's commit)")
    two = p.add_argument_group("two locks")
    two.add_argument("--good-lock", type=Path, help="a stack.lock.toml (or its directory) that works")
    two.add_argument("--bad-lock", type=Path, help="a stack.lock.toml (or its directory) that fails")
    test = p.add_mutually_exclusive_group()
    test.add_argument("--test", choices=["smoke"], help="run the smoke regression set on each step's build")
    test.add_argument("--test-cmd", metavar="CMD", help=f"a command ({CONTRACT}); it gets {ENVIRONMENT}")
    p.add_argument("--smoke-args", metavar="ARGS", default="",
                   help='extra `toolchain smoke` options for --test smoke, e.g. "--cases math,qa"')
    p.add_argument("--test-timeout", type=float, metavar="SECONDS", help="a test running longer counts as bad")
    p.add_argument("--test-needs-closure", action="store_true",
                   help="the --test-cmd installs each step's lock with its runtime closure: resolve it before each "
                        "test (default: the test gets the wheels; closures are resolved off the critical path, for "
                        "the last good and first bad locks; --test smoke always resolves each step's)")
    p.add_argument("--no-check-endpoints", action="store_true",
                   help="do not build and test the given good and bad ends before bisecting")
    p.add_argument("--every-commit", action="store_true",
                   help="every first-parent commit is a candidate (default: only those that change the component's "
                        "subdirectory, or its tree: the others build the same sources); for a build that reads "
                        "files outside its subdirectory or the repository's history")
    p.add_argument("--retry-unbuildable", action="store_true",
                   help="build again the candidates remembered as unbuildable (with --resume too: those this "
                        "bisect skipped for a failed build)")
    p.add_argument("--keep-images", action="store_true",
                   help="turn the last good and the first bad build into images (`toolchain image`), loaded into "
                        "--image-load as localhost/bisect-RECIPE:good-SHA and :bad-SHA, so the commit named runs at once "
                        "(a name an image toolchain did not make holds is left to it: NAME-2, NAME-3, ... is used and "
                        "said)")
    p.add_argument("--image-base", metavar="IMAGE@sha256:DIGEST",
                   help="with --keep-images: the base for locks that record none (an overlay's base is its own)")
    p.add_argument("--image-load", choices=("podman", "docker"), default="podman",
                   help="with --keep-images: the engine the images go into (default podman)")
    p.add_argument("--resume", action="store_true", help="continue the bisect saved in the state file")
    p.add_argument("--state", type=Path, help=f"state file (default: OUT/{STATE_NAME})")
    shared.add(p, "out", help={"out": f"where builds, logs and results go (default: ./{DEFAULT_OUT})"})
    p.add_argument("--jobs", type=int,
                   help="builds at once, at most: where one build leaves cores idle, candidates further along the "
                        "range build beside the step's (a quarter point beside the midpoint); where it keeps them "
                        "busy (a kernel build), the possible next ones build while a test runs "
                        f"(default {DEFAULT_JOBS}; 1 = no building ahead; --resume keeps the saved one)")
    shared.add(p, "cache-dir", "mirror", "no-resolve")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, ui: UI) -> CommandResult:
    if args.resume:
        _check_resume(args)
    options = None if args.resume else new_options(args)
    outcome = run_bisect(ui, args.state or default_state(args.out), options, jobs=args.jobs,
                         retry_unbuildable=args.retry_unbuildable)
    summary = outcome.summary
    if args.keep_images:
        images, renamed = keep_images(outcome.data.get("locks", {}), args, ui)
        outcome.data["images"] = images
        outcome.data["images-renamed"] = renamed
        summary += "".join(f"\n{end} image: {name}" + (f" ({renamed[end]['wanted']} is another image's)"
                                                       if end in renamed else "") for end, name in images.items())
    return CommandResult(outcome.data, 0 if outcome.ok else 1, escape(summary), outcome.tables)


def keep_images(locks: dict[str, str], args: argparse.Namespace, ui: UI
                ) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The image of each published end lock ("good", "bad"), loaded and tagged by the end and its commit; and
    for each end whose name an image the tool did not make holds (never moved), the name it took instead
    (NAME-2, NAME-3, ...: `deliver.name_of_ours`), said in a warning."""
    import re

    from toolchain.commands.image import image_and_deliver
    from toolchain.image.deliver import name_of_ours
    from toolchain.lock import read_lock

    images, renamed = {}, {}
    for end, path in sorted(locks.items()):
        lock = read_lock(Path(path))
        changed = next((c for c in lock.components if c.name == args.component), None) if args.component else None
        mark = (changed.commit[:12] if changed is not None and changed.commit else lock.recipe_sha256[:12])
        wanted = f"localhost/bisect-{re.sub(r'[^a-z0-9]+', '-', lock.recipe_name.lower()).strip('-')}:{end}-{mark}"
        tag = name_of_ours(args.image_load, wanted)
        if tag != wanted:
            renamed[end] = {"wanted": wanted, "used": tag}
            ui.warn(f"{wanted} names an image toolchain did not make in {args.image_load}: left as it is; the "
                    f"{end} image is {tag}")
        made = argparse.Namespace(tag=tag, base=args.image_base, python=None, engine="podman", load=args.image_load,
                                  push=False, insecure=False, oci_dir=None, cache_dir=args.cache_dir)
        data, _, _ = image_and_deliver(Path(path), made, ui)
        images[end] = f"{tag}@{data['digest']}"
    return images, renamed


def new_options(args: argparse.Namespace) -> BisectOptions:
    if not (args.test or args.test_cmd):
        raise UsageError("say how to test each step: --test smoke or --test-cmd CMD")
    test_cmd = tuple(shlex.split(args.test_cmd)) if args.test_cmd else ()
    if args.test_cmd is not None and not test_cmd:
        raise UsageError("--test-cmd is empty")
    if args.smoke_args and not args.test:
        raise UsageError("--smoke-args goes with --test smoke")
    options = BisectOptions(
        mode="commits", out=(args.out or DEFAULT_OUT).resolve(), test_cmd=test_cmd, test_timeout=args.test_timeout,
        smoke=smoke_command.parse_options(shlex.split(args.smoke_args)) if args.test == "smoke" else None,
        cache_dir=args.cache_dir.resolve() if args.cache_dir else None, rewrites=parse_rewrites(args.mirror),
        recipes_dir=args.recipes_dir.resolve() if args.recipes_dir else None,
        patches_dir=tuple(d.resolve() for d in args.patches_dir or ()),
        check_endpoints=not args.no_check_endpoints, resolve=not args.no_resolve,
        test_needs_closure=args.test_needs_closure, every_commit=args.every_commit)
    by_commit = [f"--{n}" for n in ("recipe", "component", "good", "bad") if getattr(args, n)]
    if args.good_lock or args.bad_lock:
        if not (args.good_lock and args.bad_lock):
            raise UsageError("a lock-to-lock bisect needs both --good-lock and --bad-lock")
        if by_commit:
            raise UsageError(f"{', '.join(by_commit)} cannot be combined with --good-lock/--bad-lock",
                             hint="the locks say which recipe and commits were built")
        return replace(options, mode="locks", good_lock=args.good_lock.resolve(), bad_lock=args.bad_lock.resolve())
    missing = [f"--{n}" for n in ("recipe", "component", "good") if not getattr(args, n)]
    if missing:
        raise UsageError(f"missing {', '.join(missing)}",
                         hint="bisect one component: --recipe R --component C --good SHA [--bad SHA]; "
                              "or two locks: --good-lock OLD --bad-lock NEW")
    return replace(options, recipe=recipe_path(args.recipe, args.recipes_dir), component=args.component, good=args.good,
                   bad=args.bad or "")


def _check_resume(args: argparse.Namespace) -> None:
    given = [f"--{n.replace('_', '-')}" for n in ("recipe", "component", "good", "bad", "good_lock", "bad_lock",
                                                  "test", "test_cmd", "smoke_args", "no_check_endpoints",
                                                  "no_resolve", "test_needs_closure", "every_commit") if getattr(args, n)]
    if given:
        raise UsageError(f"--resume continues the saved bisect; {', '.join(given)} cannot change it",
                         hint="drop them, or start a new bisect with another --state/--out")
