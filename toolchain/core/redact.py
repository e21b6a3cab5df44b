"""Secrets never reach a lock or a log: variables whose names contain these words are masked."""

from __future__ import annotations

import re
from collections.abc import Mapping

SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL")
MASK = "<redacted>"
_MIN_SECRET_LEN = 4


# Names that contain a secret word but are known settings, not secrets.
NOT_SECRET = {"TOKENIZERS_PARALLELISM", "HF_HUB_DISABLE_IMPLICIT_TOKEN", "KEYRING_BACKEND"}


def is_secret(name: str) -> bool:
    upper = name.upper()
    if upper in NOT_SECRET:
        return False
    return any(word in upper for word in SECRET_WORDS)


def redact_env(env: Mapping[str, str | None]) -> dict[str, str | None]:
    """A copy of `env` with secret values masked (names kept: the lock may say a secret was set)."""
    return {k: (MASK if is_secret(k) and v is not None else v) for k, v in env.items()}


def secret_values(env: Mapping[str, str | None]) -> list[str]:
    vals = {v for k, v in env.items() if v and is_secret(k) and len(v) >= _MIN_SECRET_LEN}
    return sorted(vals, key=len, reverse=True)


def redact_text(text: str, env: Mapping[str, str | None]) -> str:
    """Mask every secret value of `env` (and `name=value` pairs with secret names) inside `text`."""
    for value in secret_values(env):
        text = text.replace(value, MASK)
    return _ASSIGNMENT.sub(lambda m: f"{m.group(1)}={MASK}" if is_secret(m.group(1)) else m.group(0), text)


# Only secret names match, so a secret inside another value (CMAKE_ARGS=-DHF_TOKEN=...) is found too; values
# end at whitespace or NUL (`env -0` output).
_ASSIGNMENT = re.compile(r"\b([A-Za-z0-9_]*(?:{})[A-Za-z0-9_]*)=([^\s\x00]+)".format("|".join(SECRET_WORDS)), re.IGNORECASE)


def redact_url(url: str) -> str:
    """`url` without the credentials it may carry (https://user:token@host/... → https://<redacted>@host/...)."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group(1)}{MASK}@", url)


_URL_CREDENTIALS = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]+@")
