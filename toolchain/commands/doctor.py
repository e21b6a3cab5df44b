"""`toolchain doctor`: the box as build and smoke will see it, one line per fact (ok / warn / missing) with
a fix. `TOOLCHAIN_HOST_ROOT=DIR` makes it read DIR as `/` (sysfs, /dev/dri, /proc, dpkg's status,
/opt/intel/oneapi): a fake host in tests, or a mounted image of the box a user reports from."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.commands import options
from toolchain.console import UI, CommandResult

if TYPE_CHECKING:
    from toolchain.pipeline.checkup import Checkup

STATUS_STYLE = {"ok": "green", "warn": "yellow", "missing": "red"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("doctor", help="describe this box as build and smoke will see it, with fixes",
                       description="One line per fact, ok / warn / missing, each with a fix: the Intel GPUs "
                                   "(B60 = 0xe211 BMG-G21, B70 = 0xe223 BMG-G31), their driver, the render "
                                   "nodes and this user's access, the kernel, GuC/HuC firmware where readable, "
                                   "the Level Zero loader and compute runtime, oneAPI (from the recipe's setvars, "
                                   "else what is installed), oneCCL; in the target interpreter torch, its XPU "
                                   "build, torch.xpu.is_available() and the device count, and the stack's "
                                   "versions; memory and the compile jobs the plan gives; for a container recipe, last, its "
                                   "image (pulling nothing) and its engine (one trivial container with the "
                                   "recipe's run-args). Reads the box under $TOOLCHAIN_HOST_ROOT (default /). "
                                   "Exit 0 whatever it finds.")
    p.add_argument("--lock", type=Path, metavar="LOCK",
                   help="also say which libraries the lock expects of the run host (its host-provides) are present "
                        "here, and for each absent one which package brings it")
    options.add_recipe(p, help={"recipe": "recipe name or path: its target interpreter, setvars, [smoke] device and "
                                "compiled components (default: the host's python3, no recipe)"})
    p.set_defaults(handler=cmd_doctor)


def cmd_doctor(args: argparse.Namespace, ui: UI) -> CommandResult:
    from toolchain.pipeline.checkup import check_box

    recipe = options.recipe_from_args(args, pinned=False) if args.recipe else None
    return _result(check_box(recipe, args.lock, ui))


def _result(checkup: Checkup) -> CommandResult:
    """doctor's lines, one a finding with its status in colour and its fix, and the counts; the same as JSON."""
    from rich.markup import escape

    from toolchain.core.serial import to_table

    root, recipe, spec, findings = checkup.root, checkup.recipe, checkup.spec, checkup.findings
    width = max(len(f.topic) for f in findings)
    lines = [f"[{STATUS_STYLE[f.status]}]{f.status:<7}[/] {escape(f.topic):<{width}}  {escape(f.value)}"
             + (f"  [dim]fix:[/] {escape(f.fix)}" if f.fix else "") for f in findings]
    counts = {s: sum(f.status == s for f in findings) for s in STATUS_STYLE}
    return CommandResult({"root": str(root), "recipe": recipe.name if recipe else None,
                          "host": to_table(checkup.facts, kebab=True), "findings": [to_table(f) for f in findings], "counts": counts},
                         0, "\n".join([f"doctor: {root} ({recipe.name if recipe else 'no recipe'}, {spec.python} "
                                        f"on {spec.runtime})", *lines,
                                        ", ".join(f"{n} {s}" for s, n in counts.items())]))
