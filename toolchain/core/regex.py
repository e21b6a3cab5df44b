"""Regular expressions compiled where they are first used, not when their module is imported.

A warm build imports some sixty modules and uses few of their patterns; compiling every one at import (an
IGNORECASE alternation costs milliseconds) was a measurable part of its time. `Regex(pattern, flags)` is
defined at module level as `re.compile` was, and compiles on its first use; from then on its methods are the
compiled pattern's own (bound on the instance: no call through this class)."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator
from typing import Any

ASCII_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
DIGITS = "0123456789"
HEX_DIGITS = DIGITS + "abcdef"  # (lowercase: as digests and commit ids are written)


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


class Chars:
    r"""A whole text of characters from a set, its first and last from sets of their own where given, as
    `^[FIRST][CHARS]*[LAST]\Z` matches it (a name, a hex digest; `lengths`: the lengths allowed, any when
    empty), answered with `str` methods: a warm build checks a few texts against each such pattern, and
    compiling one cost more than all its checks. `match` answers as a pattern's does: the text for a match
    (truthy), None otherwise."""

    def __init__(self, chars: str, *, first: str = "", last: str = "", lengths: Collection[int] = ()) -> None:
        self.chars, self.first, self.last, self.lengths = chars, first or chars, last or chars, frozenset(lengths)

    def match(self, text: str) -> str | None:
        """`text` when all of it is made as the pattern says, else None."""
        if not text or (self.lengths and len(text) not in self.lengths):
            return None
        if text[0] not in self.first or text[-1] not in self.last or text[1:-1].strip(self.chars):
            return None
        return text


class _Userinfo:
    """`^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@`, a URL whose authority holds userinfo, with `str` methods."""

    SCHEME = Chars(ASCII_LETTERS + DIGITS + "+.-", first=ASCII_LETTERS)

    def match(self, url: str) -> str | None:
        """The URL when it holds userinfo (user:password@, token@), else None."""
        scheme, sep, rest = url.partition("://")
        if not sep or not self.SCHEME.match(scheme):
            return None
        end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
        return url if "@" in rest[:end] else None


# The patterns several modules check against, each written once.
SHA256 = "[0-9a-f]{64}"  # a sha256 as lowercase hex (a file's, a manifest's digest after "sha256:")
SHA256_HEX = Chars(HEX_DIGITS, lengths=(64,))  # (the whole text: not before a trailing newline, as `$` would)
HEX40 = Chars(HEX_DIGITS, lengths=(40,))  # a full sha1 commit id, as a recipe pins it
COMMIT_ID = Chars(HEX_DIGITS, lengths=(40, 64))  # a full git commit id: sha1 or sha256 object format
# userinfo in a URL, in any letter case: user:password@, token@, __token__:pypi-...@ (never recorded or shown)
URL_CREDENTIALS = _Userinfo()
