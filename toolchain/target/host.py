"""The host runtime: builds and smokes on this machine with the recipe's interpreter (the degenerate `Runtime`).

A runtime is a context manager. `run()` executes a one-off command in the target (probing, sourcing
setvars). `workspace()` makes a source tree, an output directory and dependency trees visible inside the
target for one build and returns a `Workspace` whose `run()` builds there and whose exit brings the
wheels back.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import re
import shutil
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Self

from toolchain import scripts
from toolchain.core.owned import check_ours, mark, remove_ours
from toolchain.core.probe_memo import stat_key
from toolchain.core.proc.runner import Completed, merge_env, run
from toolchain.errors import RecipeError
from toolchain.recipe.load import TargetSpec
from toolchain.target.facts import TargetInfo, probe_inputs, target_info

if TYPE_CHECKING:
    from toolchain.target.base import Interpreter
    from toolchain.target.parts import Extra, Workspace


class HostRuntime:
    """Builds on this machine with the recipe's interpreter."""

    kind = "host"

    def __init__(self, spec: TargetSpec | None = None) -> None:
        self.spec = spec or TargetSpec()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def describe(self) -> str:
        return "host"

    def said(self, template: str) -> str:
        """Nothing: this machine goes without saying (`Place.said`)."""
        return ""

    def which(self, program: str, py: Interpreter) -> str:
        """`program` looked up on the PATH its server sees, else as given (`ServeRuntime.which`)."""
        if not program or "/" in program:
            return program
        return shutil.which(program, path=self.serve_env(py).get("PATH") or os.environ.get("PATH")) or program

    def report(self) -> dict[str, object]:
        return {"runtime": self.kind, "mode": "host", "name": self.describe()}

    def query(self, python: str, script: Path, *args: str) -> Completed:
        """The script's `answer(args)` computed in this process (`Place.query`): its commands are this process's
        children, with its cgroup, CPU affinity and files."""
        argv = (python, str(script), *args)
        try:
            answer = _script_module(script).answer(list(args))
        except Exception as exc:  # (what the script would have printed on stderr, exiting 1)
            return Completed(argv, 1, "", f"{type(exc).__name__}: {exc}", 0.0, None)
        return Completed(argv, 0, json.dumps(answer), "", 0.0, None)

    def inherited_env(self) -> Mapping[str, str]:
        return os.environ

    # ---- builds ------------------------------------------------------------------------------------------

    def builds_at_once(self, wanted: int) -> int:
        return wanted  # each build its own tree and output directory

    def workspace_paths(self, src: Path, out: Path, deps: Mapping[str, Path]) -> tuple[str, str, dict[str, str]]:
        return str(src), str(out), {k: str(v) for k, v in deps.items()}

    def carried(self, name: str, program: Path, *, static: bool) -> Extra | None:
        from toolchain.target.parts import Extra

        return Extra(name, program)  # (this machine's own libraries are there)

    def base_env(self) -> dict[str, str]:
        return dict(os.environ)

    def toolchain_path(self, setvars: str, recipe_dir: Path) -> str:
        p = Path(setvars)
        return str(p if p.is_absolute() else (recipe_dir / p).resolve())

    def run(self, argv: Sequence[str], *, env: Mapping[str, str | None] | None = None, cwd: str | None = None,
            log: Path | None = None, capture: bool = False, check: bool = True, timeout: float | None = None,
            verbose: bool = False) -> Completed:
        return run(argv, env=merge_env(self.base_env(), env or {}), cwd=cwd, log=log, capture=capture,
                   check=check, timeout=timeout, verbose=verbose)

    def probe(self) -> TargetInfo:
        return self.probe_inputs()[0]

    def probe_inputs(self) -> tuple[TargetInfo, dict[str, list[int] | None]]:
        """The probe, and every path it read its answer from (what it opened and listed, sys.path, .pth and
        metadata files), each with its stat before it was read. Run with -S: the probe runs `site` itself,
        watched (toolchain/scripts/interpreter.py)."""
        r = self.run([self.spec.python, "-S", self.script("interpreter.py")], capture=True, check=False)
        if r.returncode != 0:
            raise RecipeError(f"target.python: {self.spec.python!r} does not run on the host "
                              f"(exit {r.returncode}): {(r.stderr or r.stdout).strip()[-500:]}",
                              hint="set [target] python to an interpreter that exists, e.g. \"python3\"")
        return target_info(self.kind, self.spec.python, r.stdout), probe_inputs(r.stdout)

    def script(self, name: str) -> str:
        """The package's own file, in place."""
        return str(scripts.path(name))

    def identity(self) -> dict[str, object] | None:
        """What a remembered probe of this interpreter depends on; None (probe every time) for wrapper
        scripts, whose answer can change without any file of theirs changing, except pyenv's shims: what
        chooses their interpreter is known (`pyenv_shim_identity`)."""
        exe = shutil.which(self.spec.python)
        if not exe:
            return None
        try:
            with open(exe, "rb") as f:
                head = f.read(4096)
        except OSError:
            return None
        stamp = stat_key(exe)  # (the memo layer's key: a rewritten interpreter is another one)
        if stamp is None:
            return None
        if head.startswith(b"#!"):
            return pyenv_shim_identity(exe, head, stamp, os.environ, Path.cwd())
        return {"python": exe, "real": os.path.realpath(exe), "stat": stamp}

    @contextlib.contextmanager
    def workspace(self, src: Path, out: Path, deps: Mapping[str, Path],
                  extras: Sequence[Extra] = ()) -> Iterator[Workspace]:
        def runner(argv: Sequence[str], *, env: Mapping[str, str | None], cwd: str, log: Path | None,
                   verbose: bool = False, capture: bool = False) -> Completed:
            return self.run(argv, env=env, cwd=cwd, log=log, verbose=verbose, capture=capture)

        from toolchain.target.parts import Workspace

        yield Workspace(*self.workspace_paths(src, out, deps), runner, {e.name: str(e.host) for e in extras})

    # ---- smoke: files, interpreters, servers ---------------------------------------------------------------

    def copy_in(self, host: Path, inside: str) -> None:
        _copy(host, Path(inside))

    def copy_out(self, inside: str, host: Path) -> None:
        host.mkdir(parents=True, exist_ok=True)
        for item in Path(inside).iterdir():
            _copy(item, host / item.name)

    def visible_path(self, host: Path) -> str:
        return str(host)

    def provides(self, dist: str) -> bool:
        return False  # (a fresh venv of this machine: what is installed into it)

    def venv_at(self, host: Path) -> str:
        return str(host.resolve())

    def leave(self, path: str, keep: bool) -> Literal["kept", "removed", ""]:
        if not os.path.isdir(path):
            return ""
        if keep:
            return "kept"
        remove_ours(Path(path), "the venv folder (--venv)")
        return "removed"

    def scratch(self, host_dir: Path) -> str:
        return str(host_dir)

    def make_venv(self, base_python: str, path: str, log: Path) -> Interpreter:
        """A fresh venv (an existing one at `path` is cleared when the tool made it: core/owned.py, else
        UsageError and nothing is touched)."""
        check_ours(Path(path), "the venv folder (--venv)")
        run([base_python, "-m", "venv", "--clear", path], log=log, timeout=600,
            env=merge_env(os.environ, {"PYTHONPATH": None, "PYTHONHOME": None}),
            hint=f"check that {base_python} can create virtual environments (python3-venv)")
        mark(Path(path))
        from toolchain.target.base import Interpreter

        return Interpreter(self, str(Path(path) / "bin" / "python"), path)

    def python_env(self, py: Interpreter) -> dict[str, str | None]:
        """The host's PYTHONPATH/PYTHONHOME must not leak packages into the checked environment."""
        return {"PYTHONPATH": None, "PYTHONHOME": None, "PIP_REQUIRE_VIRTUALENV": None, **self.serve_env(py)}

    def serve_env(self, py: Interpreter) -> dict[str, str | None]:
        if not py.venv:
            return {}
        return {"VIRTUAL_ENV": py.venv, "PATH": str(Path(py.venv) / "bin") + os.pathsep + os.environ.get("PATH", "")}

    def serve(self, argv: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        return list(argv), dict(env)


def pyenv_shim_identity(exe: str, head: bytes, stamp: list[int], env: Mapping[str, str],
                        cwd: Path) -> dict[str, object] | None:
    """The identity of a pyenv shim (`<PYENV_ROOT>/shims/python3`, a script that runs `pyenv exec`); None for
    any other wrapper script. pyenv picks the interpreter by the PYENV_* variables (PYENV_VERSION: `pyenv
    shell`), the first `.python-version` from PYENV_DIR (default: the working directory) up to /, the global
    `<PYENV_ROOT>/version` (the root the shim exports), the versions installed, and PATH (the "system" version): the variables are part of
    the identity, the files are watched (`watch`: a remembered probe is valid while none of them is created,
    changed or removed), as the interpreter's own files are for a plain one."""
    shims = Path(exe).parent
    if shims.name != "shims" or b"pyenv" not in head:
        return None
    exported = re.search(rb'^export PYENV_ROOT="([^"\n]+)"$', head, re.M)  # (the shim sets it, whatever the env says)
    root = Path(exported.group(1).decode(errors="replace")) if exported else shims.parent
    start = Path(env.get("PYENV_DIR") or cwd)
    watch = [str(d / ".python-version") for d in (start, *start.parents)]
    watch += [str(root / "version"), str(root / "versions"), exe]
    return {"python": exe, "shim": "pyenv", "stat": stamp, "path": env.get("PATH", ""),
            "env": sorted([k, v] for k, v in env.items() if k.startswith("PYENV")), "watch": watch}


def _copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


@functools.cache
def _script_module(script: Path) -> types.ModuleType:
    """The stdlib-only script file as a module (`HostRuntime.query`): the one this process already imported from
    that file (build/intarget.py is also `toolchain.build.intarget`), else loaded once as a module of its own."""
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) == str(script):
            return module
    spec = importlib.util.spec_from_file_location(f"_toolchain_query_{script.stem}", script)
    assert spec is not None, script
    assert spec.loader is not None, script
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
