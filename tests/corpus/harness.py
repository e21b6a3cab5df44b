"""How the corpus runs a case: the CLI in this process (`toolchain.cli.main`, no interpreter start per case),
with its own environment, working directory and captured output, and what every case is checked for.

A case is refused well when:
- it exits with the code the table says (2 bad input, 1 a failure of the surroundings, 0 a warning);
- the cause is ONE line (the one ERROR line, or the one warning line), naming the file, key or variable;
- no Python traceback is printed;
- nothing was written (the group's directory is byte for byte as before), where the case is a refusal;
- no secret reaches the output (SECRET is in the environment of every case, and in some inputs);
- raw terminal control characters never reach the output (an ESC in an input is shown escaped).
"""

from __future__ import annotations

import contextlib
import io
import os
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

SECRET = "corpus-secret-5f0c1d"  # never in any output
BASE_ENV = {"TOOLCHAIN_REGISTRY_USERNAME": "corpus", "TOOLCHAIN_REGISTRY_PASSWORD": SECRET,
            "COLUMNS": "4000"}  # one message per line: rich wraps at the terminal's width


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err

    def lines(self, prefix: str) -> list[str]:
        return [line for line in self.text.splitlines() if line.startswith(prefix)]

    def __str__(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


@contextlib.contextmanager
def _environment(env: Mapping[str, str | None], cwd: Path) -> Iterator[None]:
    saved, here = dict(os.environ), os.getcwd()
    try:
        for k, v in {**BASE_ENV, **env}.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        os.chdir(cwd)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        os.chdir(here)


def run_cli(argv: list[object], *, cwd: Path, env: Mapping[str, str | None] = {}) -> Outcome:
    """`toolchain ARGV` in this process; an escaping exception is printed as the traceback it would be."""
    from toolchain.build.remotecache import RemoteCache
    from toolchain.cli import main

    RemoteCache._shared.clear()  # each case meets the registry afresh, as a new process would
    out, err = io.StringIO(), io.StringIO()
    with _environment(env, cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # --help, --version
            code = int(exc.code or 0)
        except BaseException:
            traceback.print_exc(file=err)
            code = -1
    return Outcome(code, out.getvalue(), err.getvalue())


def run_call(fn: Callable[[], object], *, cwd: Path, env: Mapping[str, str | None] = {}) -> tuple[object, Outcome]:
    """A library call the way the CLI would make it, its warnings (UI on stderr) captured."""
    out, err = io.StringIO(), io.StringIO()
    result: object = None
    code = 0
    with _environment(env, cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            result = fn()
        except BaseException:
            traceback.print_exc(file=err)
            code = -1
    return result, Outcome(code, out.getvalue(), err.getvalue())


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` with its size and modification time in nanoseconds (directories as "<dir>"):
    a write, a rename into place or a removal shows, without reading every file of a cache."""
    found = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        found[str(p.relative_to(root))] = "<dir>" if p.is_dir() else f"{st.st_size}:{st.st_mtime_ns}"
    return found


@dataclass
class Case:
    id: str
    code: int                      # expected exit code
    names: tuple[str, ...]         # what the cause line must name (file, key, variable, host)
    kind: str = "ERROR:"           # the cause line's prefix: "ERROR:" or "warning:"
    writes_nothing: bool = True
    secrets: tuple[str, ...] = field(default=(SECRET,))


def problems(case: Case, r: Outcome, before: dict[str, str] | None = None,
             after: dict[str, str] | None = None) -> list[str]:
    """What is wrong with how `case` was handled (empty: refused well)."""
    found = []
    if r.code != case.code:
        found.append(f"exit {r.code}, expected {case.code}")
    if "Traceback (most recent call last)" in r.text:
        found.append("a traceback: " + r.text.strip().splitlines()[-1][:300])
    causes = r.lines(case.kind)
    if case.kind == "ERROR:" and len(causes) != 1:
        found.append(f"{len(causes)} {case.kind} lines")
    if case.kind == "warning:" and len(causes) != 1:
        found.append(f"{len(causes)} warnings: {causes}")
    text = " ".join(causes)
    if case.kind == "ERROR:" and text.rstrip().endswith(":"):  # a headline whose detail follows on more lines
        text = r.text
    missing = [n for n in case.names if n not in text]
    if causes and missing:
        found.append(f"the cause does not name {missing}: {text[:400]}")
    for secret in case.secrets:
        if secret in r.text:
            found.append(f"the secret {secret!r} is in the output")
    if "\x1b" in r.text:
        found.append("a raw ESC reached the output")
    if case.writes_nothing and before is not None and after is not None and before != after:
        changed = sorted(set(before.items()) ^ set(after.items()))
        found.append(f"wrote {[p for p, _ in changed][:5]}")
    return found


class Report:
    """The failures of one group, asserted once at its end (every case runs, the message lists them all)."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.failures: list[str] = []
        self.count = 0

    def check(self, case: Case, r: Outcome, before: dict[str, str] | None = None,
              after: dict[str, str] | None = None, extra: list[str] | None = None) -> None:
        self.count += 1
        found = problems(case, r, before, after) + (extra or [])
        if found:
            self.failures.append(f"{self.group}/{case.id}: {'; '.join(found)}\n{_short(r)}")

    def done(self, at_least: int) -> None:
        assert self.count >= at_least, f"{self.group}: only {self.count} cases ran"
        assert not self.failures, f"{len(self.failures)} of {self.count} {self.group} cases fell short:\n\n" + \
            "\n\n".join(self.failures)


def _short(r: Outcome) -> str:
    text = str(r)
    return text if len(text) < 1500 else text[:700] + "\n...\n" + text[-700:]
