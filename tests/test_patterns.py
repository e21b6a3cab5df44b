"""The checks a warm build makes with `str` methods instead of compiling a pattern (core/regex.py `Chars`, the
URL userinfo check, a command's placeholders, PEP 503 names, a requirement's name, the masking's pre-check) answer
exactly as the regular expressions they stand for, on many seeded random texts made of the characters that
matter to them (and with the whole text matched: no trailing newline taken, as `\\Z` does)."""

from __future__ import annotations

import random
import re

import pytest

from toolchain.core.checks import _HEX
from toolchain.core.redact import _HTTP_USER, _URL_PASSWORD, MASK, redact_urls
from toolchain.core.regex import COMMIT_ID, HEX40, SHA256_HEX, URL_CREDENTIALS
from toolchain.recipe.problems import ENV_NAME
from toolchain.recipe.validate import DIST_NAME, NAME, _placeholders
from toolchain.recipe.validate_fetch import CMAKE_NAME
from toolchain.resolve.closure import canonical_name
from toolchain.scripts.build_requires import _name

ALPHABET = "aZ09f_.-+{}@:/ \t\n#?xé"


def texts(n: int = 20000, longest: int = 14) -> list[str]:
    rnd = random.Random(47)
    out = ["".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, longest))) for _ in range(n)]
    return [*out, "0" * 40, "0" * 64, "f" * 63, "a" * 40 + "\n", "A" * 40, "x.y", "_x", "a", "-"]


@pytest.mark.parametrize(("ours", "pattern"), [
    (NAME, r"^[a-z0-9][a-z0-9._-]*\Z"),
    (DIST_NAME, r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?\Z"),
    (ENV_NAME, r"^[A-Za-z_][A-Za-z0-9_]*\Z"),
    (CMAKE_NAME, r"^[A-Za-z0-9_.+-]+\Z"),
    (SHA256_HEX, r"^[0-9a-f]{64}\Z"),
    (HEX40, r"^[0-9a-f]{40}\Z"),
    (COMMIT_ID, r"^(?:[0-9a-f]{40}|[0-9a-f]{64})\Z"),
    (_HEX, r"^[0-9a-f]{8,64}\Z"),
    (URL_CREDENTIALS, r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@"),
], ids=["name", "dist-name", "env-name", "cmake-name", "sha256", "sha1", "commit", "hex", "url-userinfo"])
def test_a_check_without_a_pattern_answers_as_its_pattern(ours, pattern):
    compiled = re.compile(pattern)
    hexes = [t.replace("x", "0") * k for t in ("0a", "f9") for k in (4, 20, 32, 33)]
    urls = [s + t for s in ("https://", "redis://", "a+b.c-d://", "1x://", "") for t in texts(2000)]
    for text in [*texts(), *hexes, *urls]:
        assert bool(ours.match(text)) == bool(compiled.match(text)), repr(text)


def test_placeholders_names_and_requirement_names_read_as_their_patterns():
    for text in texts():
        assert _placeholders(text) == re.findall(r"\{([^}]*)\}", text), repr(text)
        assert canonical_name(text) == re.sub(r"[-_.]+", "-", text).lower(), repr(text)
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", text)
        assert _name(text) == (m.group(1) if m else ""), repr(text)


def test_urls_are_masked_as_the_patterns_mask_them_whatever_the_pre_check_skips():
    def by_patterns(text: str) -> str:
        text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MASK}@", text)
        return _HTTP_USER.sub(lambda m: f"{m.group(1)}{MASK}@" if m.group(2) != MASK else m.group(0), text)

    for scheme in ("https://", "http://", "redis://", "rediss://", "git+ssh://", ""):
        for text in texts(5000):
            assert redact_urls(scheme + text) == by_patterns(scheme + text), repr(scheme + text)
    assert redact_urls("# engine https://demo.invalid/engine.git @ 4545736b") == \
        "# engine https://demo.invalid/engine.git @ 4545736b"
    assert redact_urls("https://user:s3cret@host/x") == f"https://user:{MASK}@host/x"
