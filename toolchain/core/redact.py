"""Secrets never reach a lock, a log, a file name, an error or --json output.

Three kinds are masked: values of variables whose names contain a secret word (TOKEN, SECRET, PASSWORD, KEY,
CREDENTIAL); `NAME=value` assignments with such names anywhere in a text or an argv; credentials in URLs
(`https://oauth2:TOKEN@host/...`, `https://TOKEN@host/...`). Masking is idempotent. Whatever must still
tell two secrets apart (a cache key) hashes the unmasked value; only the mask is ever shown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from toolchain.core.regex import Regex

SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL")
MASK = "<redacted>"
_MIN_SECRET_LEN = 4


# Names that contain a secret word but are known settings, not secrets (CACHE-KEY: a lock's `cache-key`, the hash
# of a build's inputs; with a hyphen, no environment variable's name).
NOT_SECRET = {"TOKENIZERS_PARALLELISM", "HF_HUB_DISABLE_IMPLICIT_TOKEN", "KEYRING_BACKEND", "CACHE-KEY"}


def is_secret(name: str) -> bool:
    """Whether an environment variable name looks like a secret (TOKEN, SECRET, PASSWORD, KEY, CREDENTIAL)."""
    upper = name.upper()
    if upper in NOT_SECRET:
        return False
    return any(word in upper for word in SECRET_WORDS)


def redact_env(env: Mapping[str, str | None]) -> dict[str, str | None]:
    """A copy of `env` with secret values masked (names kept: the lock may say a secret was set)."""
    return {k: (MASK if is_secret(k) and v is not None else v) for k, v in env.items()}


def secret_values(env: Mapping[str, str | None]) -> list[str]:
    """The values of secret-named variables long enough to redact, longest first (so no part is left)."""
    vals = {v for k, v in env.items() if v and is_secret(k) and len(v) >= _MIN_SECRET_LEN}
    return sorted(vals, key=len, reverse=True)


def redact_text(text: str, env: Mapping[str, str | None] | None = None) -> str:
    """Mask every secret value of `env`, `name=value` pairs with secret names and URL credentials in `text`."""
    for value in secret_values(env or {}):
        text = text.replace(value, MASK)
    if "=" in text:  # (what the pattern needs: most texts have none, and a warm build masks hundreds)
        text = _ASSIGNMENT.sub(lambda m: f"{m.group(1)}={MASK}" if is_secret(m.group(1)) else m.group(0), text)
    return redact_urls(text)


def redact_urls(text: str) -> str:
    """`scheme://user:password@` keeps the user and masks the password; `http(s)://userinfo@` (a token used
    as the user name) and `redis://password@` (ccache's form of a Redis password) mask all of it. `ssh://git@host` and scp-like `git@host:path` carry no secret."""
    if not _userinfo_after_scheme(text):  # (what both patterns need: most texts have none)
        return text
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MASK}@", text)
    return _HTTP_USER.sub(lambda m: f"{m.group(1)}{MASK}@" if m.group(2) != MASK else m.group(0), text)


def _userinfo_after_scheme(text: str) -> bool:
    """Whether an `@` follows a `://` before any `/` does: what `_URL_PASSWORD` and `_HTTP_USER` both need
    to match (their userinfo holds no `/`). A warm build masks hundreds of texts, a few with an `@` elsewhere
    (`URL @ commit`), and matching the patterns would compile them."""
    at = text.find("://")
    while at >= 0:
        rest = text[at + 3:]
        sign, slash = rest.find("@"), rest.find("/")
        if sign >= 0 and (slash < 0 or sign < slash):
            return True
        at = text.find("://", at + 3)
    return False


def redact_url(url: str) -> str:
    """One URL as it may be shown or recorded (the rule of `redact_urls`)."""
    return redact_urls(url)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """An argv as it may be recorded or shown: each argument masked like text (assignments, URLs)."""
    return [redact_text(a) for a in argv]


def redact_data(value: Any) -> Any:
    """Every string (keys included) inside nested dicts, lists and tuples masked like text (for records such
    as entry.json and a lock's recipe text). Env tables are masked by name with `redact_env`."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):  # keys too: a [mirrors] table is keyed by URL prefixes
        return {redact_data(k): redact_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_data(v) for v in value)
    return value


def holds_secret(value: Any) -> bool:
    """Whether nested data carries a secret: a credential or secret assignment in any string (keys too), or
    a value under a secret-named key (an env table's HF_TOKEN)."""
    if isinstance(value, str):
        return redact_text(value) != value
    if isinstance(value, Mapping):
        return any(holds_secret(k) or (isinstance(k, str) and is_secret(k) and isinstance(v, str) and v != MASK
                                       and len(v) >= _MIN_SECRET_LEN) or holds_secret(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(holds_secret(v) for v in value)
    return False


def without_credentials(url: str) -> str:
    """`url` with any userinfo removed: what names a repository whoever authenticates (readable parts of
    file names are made from this; a hash of the full URL still tells credentials apart)."""
    return _USERINFO.sub(r"\1", url)


# Only secret names match, so a secret inside another value (CMAKE_ARGS=-DHF_TOKEN=...) is found too; values
# end at whitespace or NUL (`env -0` output).
_ASSIGNMENT = Regex(r"\b([A-Za-z0-9_]*(?:{})[A-Za-z0-9_]*)=([^\s\x00]+)".format("|".join(SECRET_WORDS)), re.IGNORECASE)
# scheme://user:password@ (user without '/', '@', ':' or whitespace; the password may hold ':', and an '@' left
# unencoded: it runs to the last '@' before the host's '/', as URL parsers read it)
_URL_PASSWORD = Regex(r"\b([A-Za-z][A-Za-z0-9+.-]*://)([^/@:\s'\"]*):([^/\s'\"]+)@")
# http(s)://token@ and redis://password@ (no password part: the one word is the secret)
_HTTP_USER = Regex(r"\b(https?://|rediss?://)([^/@:\s'\"]+)@", re.IGNORECASE)
_USERINFO = Regex(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")
