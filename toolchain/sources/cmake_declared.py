"""The FetchContent dependencies a component's CMake files declare, read at the pinned commit from its mirror.

A build that runs CMake itself (ARK's setup.py runs it twice) fetches every `FetchContent_Declare(NAME
GIT_REPOSITORY URL GIT_TAG TAG)` it reaches, whoever starts it; what the recipe does not pin is fetched from
the network at configure time and is in no lock. This module finds those declarations so that the build
refuses an unpinned one before compiling (build/fetchcontent_check.py) and `toolchain plan` lists declared
against pinned. It reads `CMakeLists.txt` and `*.cmake` under the component's subdir, at the commit (before
the recipe's patches), with one `git grep` and a `git show` per file that declares one. `${VAR}` in a declaration is
resolved from the last `set(VAR "value" ...)` above it in the same file (ARK's `SYCL_TLA_GIT_TAG`); a value
set anywhere else stays `${VAR}`. Declarations are found wherever they are, inside an `if()` too: which ones a
configuration reaches is what the recipe states (`fetchcontent-unused`, `fetchcontent-network`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from toolchain.core.git import git
from toolchain.core.proc.runner import CommandFailed
from toolchain.core.record import record
from toolchain.core.regex import COMMIT_ID, Regex

_DECLARE = Regex(r"\bFetchContent_Declare\s*\(", re.IGNORECASE)
_SET = Regex(r"\bset\s*\(\s*([A-Za-z0-9_.+-]+)\s+(\"[^\"]*\"|[^\s)]+)", re.IGNORECASE)
_VAR = Regex(r"\$\{([A-Za-z0-9_.+-]+)\}")
_KEYWORDS = ("GIT_REPOSITORY", "GIT_TAG", "URL", "SOURCE_DIR")


@record
class Declared:
    """One `FetchContent_Declare`: where (`file` in the repository, 1-based `line`), the dependency's name and
    what it fetches (`repository`, `tag`; `url` for an archive), with `${VAR}` resolved where the file sets it."""
    file: str
    line: int
    name: str
    repository: str = ""
    tag: str = ""
    url: str = ""

    @property
    def label(self) -> str:
        """How messages quote it: `FILE:LINE FetchContent_Declare(NAME GIT_REPOSITORY R GIT_TAG T)`."""
        what = " ".join(f"{k} {v}" for k, v in (("GIT_REPOSITORY", self.repository), ("GIT_TAG", self.tag),
                                                ("URL", self.url)) if v)
        return f"{self.file}:{self.line} FetchContent_Declare({self.name}{' ' + what if what else ''})"


def is_cmake_file(path: str) -> bool:
    """CMakeLists.txt and *.cmake: the files CMake reads as code."""
    name = PurePosixPath(path).name
    return name == "CMakeLists.txt" or name.endswith(".cmake")


def _strip_comments(text: str) -> str:
    """`# ...` to the end of each line blanked (outside quotes), keeping offsets and line numbers."""
    out, quoted = [], False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            quoted = not quoted
        elif ch == "#" and not quoted:
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            out.append(" " * (end - i))
            i = end
            continue
        elif ch == "\n":
            quoted = False if text[i - 1:i] != "\\" else quoted
        out.append(ch)
        i += 1
    return "".join(out)


def _tokens(args: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    quoted = False
    for ch in args:
        if ch == '"':
            quoted = not quoted
        elif ch.isspace() and not quoted:
            if cur:
                out.append("".join(cur))
                cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


def declarations(path: str, text: str) -> list[Declared]:
    """Every `FetchContent_Declare` of one CMake file's text (`path`: its name in messages)."""
    code = _strip_comments(text)
    found = []
    for m in _DECLARE.finditer(code):
        start = m.end()
        end = code.find(")", start)
        if end < 0:
            continue
        words = _tokens(code[start:end])
        if not words:
            continue
        sets = {s.group(1): s.group(2).strip('"') for s in _SET.finditer(code[:m.start()])}
        values: dict[str, str] = {}
        for i, word in enumerate(words[1:-1], 1):
            if word in _KEYWORDS and words[i + 1] not in _KEYWORDS:
                values[word] = _VAR.sub(lambda v: sets.get(v.group(1), v.group(0)), words[i + 1])
        found.append(Declared(file=path, line=code.count("\n", 0, m.start()) + 1, name=words[0],
                              repository=values.get("GIT_REPOSITORY", ""), tag=values.get("GIT_TAG", ""),
                              url=values.get("URL", "")))
    return found


def declared_in_files(files: Mapping[str, str]) -> tuple[Declared, ...]:
    """The declarations of several files ({path: text}), in path order."""
    return tuple(d for path in sorted(files) for d in declarations(path, files[path]))


def declared_at(mirror: Path, commit: str, subdir: str = "") -> tuple[Declared, ...]:
    """The declarations of the CMake files under `subdir` of a bare mirror at `commit`: one `git grep` names
    the files that mention FetchContent_Declare, one `git show` reads each. A full commit id's are read once
    in this process (what it holds never changes): a build asks before it fetches and again before it
    compiles, and a bisect asks at every step."""
    key = (str(mirror), commit, subdir)
    if COMMIT_ID.match(commit):
        with _READ_LOCK:
            known = _READ.get(key)
        if known is not None:
            return known
    found = _declared_at(mirror, commit, subdir)
    if COMMIT_ID.match(commit):
        with _READ_LOCK:
            if len(_READ) >= _READ_MAX:
                _READ.pop(next(iter(_READ)))
            _READ[key] = found
    return found


_READ: dict[tuple[str, str, str], tuple[Declared, ...]] = {}  # (mirror, commit, subdir) -> its declarations
_READ_LOCK = threading.Lock()
_READ_MAX = 1024


def _declared_at(mirror: Path, commit: str, subdir: str) -> tuple[Declared, ...]:
    done = git(["grep", "-l", "-i", "-z", "FetchContent_Declare", commit, "--", subdir or "."], git_dir=mirror,
               check=False)
    if done.returncode not in (0, 1):
        raise CommandFailed(done.argv, done.returncode, None, done.stderr)
    prefix = f"{commit}:"
    paths = [p.removeprefix(prefix) for p in done.stdout.split("\0") if p]
    files = {p: git(["show", f"{commit}:{p}"], git_dir=mirror).stdout for p in paths if is_cmake_file(p)}
    return declared_in_files(files)


__all__ = ["Declared", "declarations", "declared_at", "declared_in_files", "is_cmake_file"]
