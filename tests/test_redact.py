"""Secrets: names containing TOKEN, SECRET, PASSWORD, KEY or CREDENTIAL never reach a lock, a log, or --json
output, while the build itself still sees them. Unit tests of toolchain/redact.py, then real builds."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from tests.spine_helpers import STANDIN_SETVARS, component, recipe_data
from toolchain.core.redact import MASK, is_secret, redact_env, redact_text

INVOKER_SECRET = "invoker-secret-5f2a9c"       # in the environment that runs `toolchain build`
SETVARS_SECRET = "setvars-secret-81be04"       # exported by the toolchain's setvars script


@pytest.mark.parametrize("name", ["HF_TOKEN", "hf_token", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "API_KEY",
                                  "GOOGLE_APPLICATION_CREDENTIALS", "GITHUB_TOKEN"])
def test_secret_names(name):
    assert is_secret(name)


@pytest.mark.parametrize("name", ["PATH", "MAX_JOBS", "CMPLR_ROOT", "VLLM_TARGET_DEVICE", "HOME", "CMAKE_ARGS"])
def test_ordinary_names(name):
    assert not is_secret(name)


def test_redact_env_masks_values_and_keeps_names():
    env = {"HF_TOKEN": "hf_abcdef", "PATH": "/usr/bin", "DB_PASSWORD": None}
    assert redact_env(env) == {"HF_TOKEN": MASK, "PATH": "/usr/bin", "DB_PASSWORD": None}
    assert env["HF_TOKEN"] == "hf_abcdef"  # a copy


def test_redact_text_masks_values_of_secret_variables_anywhere():
    env = {"HF_TOKEN": "hf_abcdef123", "PATH": "/usr/bin", "SHORT_KEY": "ab"}
    text = "curl -H 'Authorization: Bearer hf_abcdef123' https://x\nPATH is /usr/bin\nab stays\n"
    assert redact_text(text, env) == f"curl -H 'Authorization: Bearer {MASK}' https://x\nPATH is /usr/bin\nab stays\n"


@pytest.mark.parametrize(("text", "expected"), [
    ("HF_TOKEN=abc MAX_JOBS=8", f"HF_TOKEN={MASK} MAX_JOBS=8"),
    ("export api_key=xyz", f"export api_key={MASK}"),
    # `env -0` output (what sourcing setvars logs): values end at NUL, each assignment is checked
    ("A=1\0VENDOR_TOKEN=abc\0B=2", f"A=1\0VENDOR_TOKEN={MASK}\0B=2"),
    # a secret inside another variable's value is still found
    ("CMAKE_ARGS=-DFOO=1 -DHF_TOKEN=abc", f"CMAKE_ARGS=-DFOO=1 -DHF_TOKEN={MASK}"),
    ("CMAKE_ARGS=-DHF_TOKEN=abc", f"CMAKE_ARGS=-DHF_TOKEN={MASK}"),
    ("PATH=/usr/bin:/bin", "PATH=/usr/bin:/bin"),
])
def test_redact_text_masks_assignments_to_secret_names(text, expected):
    assert redact_text(text, {}) == expected
    assert redact_text(expected, {}) == expected  # idempotent



@pytest.mark.parametrize(("url", "secret"), [
    ("https://__token__:pypi-AgEIcHlwaS5vcmc@pypi.example/simple", "pypi-AgEIcHlwaS5vcmc"),
    ("HTTPS://USER:UPPERsecret@INDEX.EXAMPLE/simple", "UPPERsecret"),
    ("https://ghp_tokenAsUser@index.example/simple", "ghp_tokenAsUser"),
    # an unencoded '@' in the password: a URL parser reads up to the last '@', so does the mask
    ("https://user:pa@ss-tail@index.example/simple", "ss-tail"),
])
def test_credentials_in_index_urls_are_masked_in_any_case_and_form(url, secret):
    text = f"error: Failed to fetch: {url}/tomli/ (and {url})"
    masked = redact_text(text, {})
    assert secret not in masked
    assert ".example/simple/tomli/" in masked.lower()
    assert redact_text(masked, {}) == masked

def _all_text(root: Path) -> dict[str, str]:
    """Every file under root (wheels: every member) as text, for leak checks."""
    out = {}
    for p in root.rglob("*"):
        if not p.is_file():
            continue
        if p.suffix == ".whl":
            with zipfile.ZipFile(p) as z:
                for n in z.namelist():
                    out[f"{p}!{n}"] = z.read(n).decode("utf-8", "replace")
        else:
            out[str(p)] = p.read_bytes().decode("utf-8", "replace")
    return out


def _leaks(texts: dict[str, str], *secrets: str) -> list[str]:
    return [f"{name} contains {s}" for name, t in texts.items() for s in secrets if s in t]


@pytest.fixture
def secret_setvars(ws) -> Path:
    script = ws.root / "oneapi" / "setvars.sh"
    script.parent.mkdir()
    script.write_text(f'source "{STANDIN_SETVARS}" "$@"\nexport VENDOR_LICENSE_TOKEN={SETVARS_SECRET}\n'
                      'echo "licence: $VENDOR_LICENSE_TOKEN"\n')
    return script


VERBOSE_PIP = ["{python}", "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "{src}", "-w", "{out}"]


def test_secrets_never_reach_lock_logs_or_json_while_the_build_sees_them(ws, tiny_repo, secret_setvars):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo, command=VERBOSE_PIP)}, setvars=str(secret_setvars)))
    env = {"TINY_API_TOKEN": INVOKER_SECRET, "TINY_PRINT_ENV": "1"}  # the build prints its whole environment
    r = ws.build("r", env=env)
    assert r.returncode == 0, str(r)
    log = (ws.root / "out" / "logs" / "tiny.log").read_text()
    assert f"TINY_API_TOKEN={MASK}" in log
    assert f"VENDOR_LICENSE_TOKEN={MASK}" in log
    assert "CMPLR_ROOT=" in log  # the env really was printed into the log
    info = json.loads(zipfile.ZipFile(next((ws.root / "out" / "wheels").glob("*.whl"))).read(
        "tiny/_build_info.json"))
    assert info["sha256"]["TINY_API_TOKEN"] == hashlib.sha256(INVOKER_SECRET.encode()).hexdigest()  # seen
    assert _leaks(_all_text(ws.root / "out"), INVOKER_SECRET, SETVARS_SECRET) == []
    assert _leaks({"stdout": r.stdout, "stderr": r.stderr}, INVOKER_SECRET, SETVARS_SECRET) == []
    assert _leaks({p: t for p, t in _all_text(ws.cache).items() if p.endswith(".log")},
                  INVOKER_SECRET, SETVARS_SECRET) == []  # the log kept with the cache entry
    assert _leaks(_all_text(ws.cache), INVOKER_SECRET) == []

    plan = ws.cli("plan", "--recipe", "r", "--json", env=env)
    assert plan.returncode == 0, str(plan)
    assert plan.json()["toolchain"]["env"]["VENDOR_LICENSE_TOKEN"] == MASK
    verbose = ws.build("r", "again", "-v", env=env)
    assert verbose.returncode == 0, str(verbose)
    assert _leaks({"plan": plan.output, "verbose": verbose.output}, INVOKER_SECRET, SETVARS_SECRET) == []


def test_a_failing_build_does_not_leak_secrets_into_the_error(ws, make_repo):
    repo = make_repo("fails", "fails")
    ws.recipe("r", recipe_data({"fails": component(repo, command=VERBOSE_PIP)}))
    r = ws.build("r", env={"TINY_API_TOKEN": INVOKER_SECRET, "TINY_PRINT_ENV": "1"})
    assert r.returncode == 1, str(r)
    assert "TINY-BUILD-FAILS" in r.json()["error"]
    assert _leaks({"out": r.output, **_all_text(ws.root / "out")}, INVOKER_SECRET) == []


def test_a_failing_setvars_does_not_leak_secrets_into_the_error(ws, tiny_repo):
    script = ws.root / "setvars.sh"
    script.write_text(f'echo "using $TINY_API_TOKEN and VENDOR_KEY={SETVARS_SECRET}" >&2\nreturn 4\n')
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)}, setvars=str(script)))
    r = ws.build("r", env={"TINY_API_TOKEN": INVOKER_SECRET})
    assert r.returncode == 1, str(r)
    assert f"using {MASK} and VENDOR_KEY={MASK}" in r.json()["error"]
    assert _leaks({"out": r.output}, INVOKER_SECRET, SETVARS_SECRET) == []


def test_a_recipe_cannot_carry_a_secret(ws, tiny_repo):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo, env={"TINY_API_TOKEN": INVOKER_SECRET})}))
    before = ws.snapshot()
    r = ws.build("r")
    assert r.returncode == 2, str(r)
    assert "components.tiny.env.TINY_API_TOKEN: looks like a secret" in r.json()["error"]
    assert INVOKER_SECRET not in r.output  # not even echoed back
    assert ws.snapshot() == before


def test_toml_text_holding_a_secret_is_never_remembered_on_disk(tmp_path):
    from toolchain.core.redact import holds_secret
    from toolchain.core.toml import dumps_remembered

    plain = {"components": {"a": {"url": "https://example.invalid/a.git", "env": {"MAX_JOBS": "2"}}}}
    secret = {"components": {"a": {"url": f"https://oauth2:{INVOKER_SECRET}@example.invalid/a.git"}}}
    named = {"components": {"a": {"env": {"HF_TOKEN": INVOKER_SECRET}}}}
    assert not holds_secret(plain)
    assert holds_secret(secret)
    assert holds_secret(named)
    for data in (plain, secret, named):
        assert INVOKER_SECRET in dumps_remembered(data, tmp_path / "memo") or data is plain
    kept = [p.read_text() for p in (tmp_path / "memo").rglob("*") if p.is_file()]
    assert any("example.invalid/a.git" in t for t in kept)  # the plain text was remembered
    assert not [t for t in kept if INVOKER_SECRET in t]
