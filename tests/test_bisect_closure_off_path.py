"""A bisect whose test does not install the closure resolves it off the steps' critical path (issue 48):
`toolchain bisect` as a real process, real git, real wheel builds (the tiny backend), real uv, a real PEP 503
index on 127.0.0.1.

The history changes its declared requirements three times (c2 adds tomli, c5 drops packaging, c6 loosens
tomli); c5 is the first bad. Each test records whether the lock it was given pinned a closure: none did (no
step waited for a resolution before its test). The locks the result names, the first bad and its good
parent, pin their closures all the same, each its own requirement set's; the result says what the bisect
spent (compile, test, resolve, wait). A rerun compiles nothing and still names c5 with its closures."""

from __future__ import annotations

import json
import sys

import pytest

from tests.spine_helpers import component, recipe_data
from tests.support.closure import CountingIndex, simple_index, wheelhouse
from toolchain.lock import read_lock

pytestmark = pytest.mark.slow

FIRST_BAD, LAST = 5, 7

CHECK = """\
import glob, os, sys, tomllib, zipfile
lock = tomllib.load(open(os.environ["TOOLCHAIN_BISECT_LOCK"], "rb"))
with open(sys.argv[1], "a") as seen:
    seen.write(os.environ["TOOLCHAIN_BISECT_COMMIT"] + " " + str("dependencies" in lock) + "\\n")
(wheel,) = glob.glob(os.path.join(os.environ["TOOLCHAIN_BISECT_WHEEL_DIR"], "tiny-*.whl"))
sys.exit(0 if "42" in zipfile.ZipFile(wheel).read("tiny/value.py").decode() else 1)
"""


def _deps(i: int) -> str:
    """The requirements of commit i: three changes across the range."""
    if i < 2:
        return '"packaging>=24"'
    if i < FIRST_BAD:
        return '"packaging>=24", "tomli>=2"'
    return '"tomli>=2"' if i < 6 else '"tomli"'


def test_a_bisect_whose_test_needs_no_closure_resolves_off_the_critical_path(ws, make_repo, tmp_path):
    repo = make_repo("kern", "tiny")
    base = (repo.path / "pyproject.toml").read_text()
    shas = [repo.commit(f"kern change {i}", {
        "tiny/value.py": f"VALUE = {41 if i >= FIRST_BAD else 42}\n",
        "pyproject.toml": base.replace('version = "1.0.0"', f'version = "1.0.0"\ndependencies = [{_deps(i)}]')})
        for i in range(LAST + 1)]
    index = CountingIndex(simple_index(wheelhouse(tmp_path / "wheels"), tmp_path / "index").parent)
    ws.recipe("net", recipe_data({"kern": component(repo, shas[-1], dist="tiny")},
                                 resolve={"indexes": [f"{index.url}/simple"]}))
    (ws.root / "check.py").write_text(CHECK)

    def bisect(out: str, *how: str) -> tuple[dict, str, list[str]]:
        seen = ws.root / f"{out}.seen"
        r = ws.cli("bisect", "--recipe", "net", "--component", "kern", "--good", shas[0], "--bad", shas[-1],
                   "--cache-dir", ws.cache, "--out", ws.root / out, "--jobs", "1",
                   "--test-cmd", f"{sys.executable} check.py {seen}", *how)
        assert r.returncode == 0, str(r)
        data = json.loads((ws.root / out / "result.json").read_text())
        return data, r.stderr + r.stdout, seen.read_text().splitlines()

    with index:
        data, said, seen = bisect("o1", "--json")
        assert "replaced from the cache" not in said, said  # (the tests' wheel folders keep no second name of the out wheels)
        result = data["result"]
        assert result["first_bad"]["key"] == shas[FIRST_BAD]
        assert result["last_good"]["key"] == shas[FIRST_BAD - 1]
        assert [c["endpoint"] for c in result["checks"]] == ["good", "bad"]  # both ends checked
        # every test (the ends' and the steps') got a lock without a closure: none waited for a resolution
        assert len(seen) == len(result["checks"]) + len(result["steps"]) >= 4, seen
        assert all(line.endswith(" False") for line in seen), seen
        # the locks the result names pin their closures, each its own requirement set's
        good, bad = (read_lock(ws.root / "o1" / end / "stack.lock.toml").closure for end in ("good", "bad"))
        assert good is not None and sorted(d.name for d in good.dists) == ["packaging", "tomli"], good
        assert bad is not None and [d.name for d in bad.dists] == ["tomli"], bad
        assert any("/simple/tomli/" in p for p in index.requests), index.requests
        # what it spent, in the JSON and in the report
        spent = result["spent"]
        assert set(spent) == {"compile", "test", "resolve", "resolve_waited", "wait", "wall"}, spent
        assert spent["resolve"] > 0 and spent["test"] > 0 and spent["compile"] > 0, spent
        # (the background and the result's own completions may overlap: resolve is not bounded by wall)
        assert spent["resolve_waited"] <= spent["resolve"] and spent["resolve_waited"] <= spent["wall"], spent

    # again into a new --out, the index stopped: nothing compiled, the same commit, the closures kept
    data, report, _ = bisect("o2")
    assert data["result"]["first_bad"]["key"] == shas[FIRST_BAD]
    assert data["result"]["builds"]["compiled"] == 0, data["result"]["builds"]
    assert data["result"]["spent"]["compile"] == 0, data["result"]["spent"]
    bad = read_lock(ws.root / "o2" / "bad" / "stack.lock.toml").closure
    assert bad is not None and [d.name for d in bad.dists] == ["tomli"], bad
    assert "spent: compile 0.0 s" in report and "bisect spent (seconds)" in report, report  # the summary, the table
