"""What a value of a checked format must be (a lock's, read back before it is trusted): each check a pair
(what it must be, in words; the test), declared on a dataclass field with `core.serial.meta(check=)`."""

from __future__ import annotations

from toolchain.core.regex import COMMIT_ID, HEX_DIGITS, SHA256_HEX, Chars
from toolchain.core.serial import Check

_HEX = Chars(HEX_DIGITS, lengths=range(8, 65))  # ^[0-9a-f]{8,64}\Z

STR: Check = ("a string", lambda v: isinstance(v, str))
NAME: Check = ("a non-empty string", lambda v: isinstance(v, str) and bool(v.strip()))
SHA256: Check = ("a 64-hex sha256", lambda v: isinstance(v, str) and SHA256_HEX.match(v) is not None)
COMMIT: Check = ("a full commit id (40 or 64 hex)", lambda v: isinstance(v, str) and COMMIT_ID.match(v) is not None)
HEX: Check = ("a hex digest", lambda v: isinstance(v, str) and _HEX.match(v) is not None)
SIZE: Check = ("a non-negative integer", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0)
SECONDS: Check = ("a non-negative number",
                  lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0)
STRS: Check = ("an array of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v))
ARGV: Check = ("a non-empty array of strings",
               lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v))
ENV: Check = ("a table of strings", lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()))
TABLE: Check = ("a table", lambda v: isinstance(v, dict))
TABLES: Check = ("an array of tables", lambda v: isinstance(v, list))
DIST_FILE: Check = ("a file name (no '/')", lambda v: isinstance(v, str) and bool(v) and "/" not in v and "\\" not in v
                    and "\0" not in v and v not in (".", ".."))
