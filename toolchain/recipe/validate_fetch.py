"""A component's CMake FetchContent keys, validated (recipe.validate calls these): the pinned dependencies
(`[[components.NAME.fetchcontent]]`: name, url, commit) and the dependencies the sources declare that the recipe
leaves unpinned on purpose, each with its reason: `fetchcontent-unused` (this configuration never fetches it:
everything stays offline) and `fetchcontent-network` (CMake fetches it itself at configure time: the build then
needs the network, or a mirror rewrite). Every other declared dependency must be pinned (build/fetchcontent_check.py)."""

from __future__ import annotations

from typing import Any

from toolchain.core.regex import ASCII_LETTERS, DIGITS, HEX40, Chars
from toolchain.recipe.keys import keys_of
from toolchain.recipe.model import FetchContentDep
from toolchain.recipe.problems import ENV_NAME, _Problems

CMAKE_NAME = Chars(ASCII_LETTERS + DIGITS + "_.+-")  # ^[A-Za-z0-9_.+-]+\Z
FETCH_KEYS = keys_of(FetchContentDep)


def _fetchcontent(items: Any, pr: _Problems, where: str) -> tuple[FetchContentDep, ...]:
    if not isinstance(items, list):
        return ()
    out, seen = [], set()
    for i, f in enumerate(items):
        w = f"{where}.fetchcontent[{i}]"
        if not isinstance(f, dict):
            pr.add(w, "must be a table with name, url and commit")
            continue
        pr.check_keys(f, FETCH_KEYS, f"{w}.")
        name, url, commit = f.get("name"), f.get("url"), f.get("commit")
        if not isinstance(name, str) or not CMAKE_NAME.match(name or ""):
            pr.add(f"{w}.name", "missing: the name used in FetchContent_Declare")
        elif name.upper() in seen:
            pr.add(f"{w}.name", f"{name!r} is declared twice")
        else:
            seen.add(name.upper())
        if not isinstance(url, str) or not url:
            pr.add(f"{w}.url", "missing: the repository to pre-fetch")
        if not isinstance(commit, str) or not HEX40.match(commit):
            pr.add(f"{w}.commit", f"must be a 40-hex commit id, got {commit!r}")
        env = f.get("env", "")
        if isinstance(env, str) and env and not ENV_NAME.match(env):
            pr.add(f"{w}.env", "not a valid environment variable name")
        if isinstance(name, str) and isinstance(url, str) and isinstance(commit, str):
            out.append(FetchContentDep(name, url, commit, env if isinstance(env, str) else ""))
    return tuple(out)


def _unpinned(table: Any, pr: _Problems, where: str, pinned: tuple[FetchContentDep, ...]) -> tuple[tuple[str, str], ...]:
    """`fetchcontent-unused` / `fetchcontent-network`: {FetchContent name = "why it is not pinned"}."""
    if not isinstance(table, dict):
        return ()
    out = []
    names = {d.name.upper() for d in pinned}
    for name, reason in table.items():
        if not CMAKE_NAME.match(name):
            pr.add(f"{where}.{name}", "not a FetchContent name")
        elif not isinstance(reason, str) or not reason.strip():
            pr.add(f"{where}.{name}", "the value is the reason it is not pinned (a non-empty string)")
        elif name.upper() in names:
            pr.add(f"{where}.{name}", "is also pinned in [[fetchcontent]]: keep one")
        else:
            out.append((name, reason))
    return tuple(out)
