"""`toolchain` command line. Thin: parse, call a stage's handler, print its result or one ERROR line."""

from __future__ import annotations

import argparse
import importlib
import sys

from toolchain import __version__
from toolchain.console import UI
from toolchain.errors import ToolError, UsageError

# Each module exposes register(subparsers, common); its parsers set_defaults(handler=fn(args, ui) -> CommandResult).
# Only the module of the command being run is imported (a warm no-op build must start fast).
COMMANDS = {
    "build": "toolchain.commands.stack", "plan": "toolchain.commands.stack", "update": "toolchain.commands.stack",
    "recipes": "toolchain.commands.stack",
    "smoke": "toolchain.commands.smoke",
    "bisect": "toolchain.commands.bisect",
    "verify-repro": "toolchain.commands.verify_repro",
}
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # usage errors: exit 2, no traceback
        raise UsageError(f"{self.prog}: {message}", hint=f"see `{self.prog} --help`")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    common.add_argument("-v", "--verbose", action="store_true", help="stream command output")
    parser = _Parser(prog="toolchain", description=__doc__, parents=[common])
    parser.add_argument("--version", action="version", version=f"toolchain {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in ((COMMANDS[only],) if only in COMMANDS else COMMAND_MODULES):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                continue  # a command not shipped in this build
            raise
        module.register(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    ui = UI(json_mode="--json" in args_list)
    try:
        first = next((a for a in args_list if not a.startswith("-")), None)
        parser = build_parser(first)
        args = parser.parse_args(args_list)
        ui = UI(json_mode=getattr(args, "json", False), verbose=getattr(args, "verbose", False))
        if not getattr(args, "handler", None):
            parser.print_help(sys.stderr)
            return 2
        result = args.handler(args, ui)
        ui.emit(result)
        return result.exit_code
    except ToolError as err:
        _report(ui, err)
        return err.return_code
    except KeyboardInterrupt:
        ui.err.print("[red]interrupted[/]")
        return 130


def _report(ui: UI, err: ToolError) -> None:
    if ui.json_mode:
        import json

        payload = {"ok": False, "error": str(err), "hint": err.hint, "exit_code": err.return_code,
                   "kind": type(err).__name__}
        problems = getattr(err, "problems", None)
        if problems:
            payload["problems"] = problems
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    from rich.markup import (
        escape,  # messages name TOML tables ("[toolchain] setvars"): not markup
    )

    ui.err.print(f"[bold red]ERROR:[/] {escape(str(err))}", markup=True, highlight=False, soft_wrap=True)
    if err.hint:
        ui.err.print(f"[bold]TIP:[/] {escape(err.hint)}", highlight=False, soft_wrap=True)
