"""Regular expressions compiled where they are first used, not when their module is imported.

A warm build imports some sixty modules and uses few of their patterns; compiling every one at import (an
IGNORECASE alternation costs milliseconds) was a measurable part of its time. `Regex(pattern, flags)` is
defined at module level as `re.compile` was, and compiles on its first use; from then on its methods are the
compiled pattern's own (bound on the instance: no call through this class)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any


class Regex:
    """A `re.Pattern[str]` made on first use: the methods the tool calls, with the same signatures."""

    _METHODS = ("match", "fullmatch", "search", "finditer", "findall", "sub", "subn", "split")

    def __init__(self, pattern: str, flags: int | re.RegexFlag = 0) -> None:
        self.pattern, self.flags = pattern, int(flags)

    @property
    def compiled(self) -> re.Pattern[str]:
        """The pattern, compiled now if not yet; its methods then replace this class's on the instance."""
        found = self.__dict__.get("_compiled")
        if found is None:
            found = self.__dict__["_compiled"] = re.compile(self.pattern, self.flags)
            for name in self._METHODS:
                setattr(self, name, getattr(found, name))
        return found

    def match(self, text: str, pos: int = 0, endpos: int = 2**63 - 1) -> re.Match[str] | None:
        """re.Pattern.match on the compiled pattern."""
        return self.compiled.match(text, pos, endpos)

    def fullmatch(self, text: str, pos: int = 0, endpos: int = 2**63 - 1) -> re.Match[str] | None:
        """re.Pattern.fullmatch on the compiled pattern."""
        return self.compiled.fullmatch(text, pos, endpos)

    def search(self, text: str, pos: int = 0, endpos: int = 2**63 - 1) -> re.Match[str] | None:
        """re.Pattern.search on the compiled pattern."""
        return self.compiled.search(text, pos, endpos)

    def finditer(self, text: str, pos: int = 0, endpos: int = 2**63 - 1) -> Iterator[re.Match[str]]:
        """re.Pattern.finditer on the compiled pattern."""
        return self.compiled.finditer(text, pos, endpos)

    def findall(self, text: str, pos: int = 0, endpos: int = 2**63 - 1) -> list[Any]:
        """re.Pattern.findall on the compiled pattern."""
        return self.compiled.findall(text, pos, endpos)

    def sub(self, repl: str | Callable[[re.Match[str]], str], text: str, count: int = 0) -> str:
        """re.Pattern.sub on the compiled pattern."""
        return self.compiled.sub(repl, text, count)

    def subn(self, repl: str | Callable[[re.Match[str]], str], text: str, count: int = 0) -> tuple[str, int]:
        """re.Pattern.subn on the compiled pattern."""
        return self.compiled.subn(repl, text, count)

    def split(self, text: str, maxsplit: int = 0) -> list[str | None]:
        """re.Pattern.split on the compiled pattern."""
        return self.compiled.split(text, maxsplit)


# The patterns several modules check against, each written once.
SHA256 = "[0-9a-f]{64}"  # a sha256 as lowercase hex (a file's, a manifest's digest after "sha256:")
SHA256_HEX = Regex(rf"^{SHA256}\Z")  # (\Z: not before a trailing newline, as `$` would)
HEX40 = Regex(r"^[0-9a-f]{40}\Z")  # a full sha1 commit id, as a recipe pins it
COMMIT_ID = Regex(rf"^(?:[0-9a-f]{{40}}|{SHA256})\Z")  # a full git commit id: sha1 or sha256 object format
# userinfo in a URL, in any letter case: user:password@, token@, __token__:pypi-...@ (never recorded or shown)
URL_CREDENTIALS = Regex(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@")
