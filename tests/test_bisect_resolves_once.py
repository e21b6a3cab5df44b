"""A bisect resolves the runtime closure once per change (issue 26), as a user bisecting a component whose
closure comes from an index meets it: `toolchain bisect` as a real process, real git, real `pip wheel` builds
(the tiny backend), real uv, a real PEP 503 index served on 127.0.0.1 that counts its requests and is then
stopped.

The closure is kept under a key made of the built wheels' metadata, not their hashes: a step that changed no
requirement takes the kept closure (no uv, no index request), a step that changed one resolves again. On the
code before the memo, every step resolved: as many resolve.log files and index round trips as steps; while
the memo's key held the built wheel's version, every step whose version moved (setuptools-scm's at every
commit) resolved too."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.spine_helpers import component, recipe_data
from tests.support.closure import CountingIndex, simple_index, wheelhouse
from toolchain.lock import read_lock

pytestmark = pytest.mark.slow

FIRST_BAD, LAST = 5, 7

CHECK = """\
import glob, os, sys, zipfile
(wheel,) = glob.glob(os.path.join(os.environ["TOOLCHAIN_BISECT_WHEEL_DIR"], "tiny-*.whl"))
sys.exit(0 if "42" in zipfile.ZipFile(wheel).read("tiny/value.py").decode() else 1)
"""


def _steps(out: Path) -> dict[str, Path]:
    """The builds of a bisect (its ends and steps): commit prefix -> the step's out dir."""
    return {d.name: d for d in sorted((out / "steps").iterdir()) if (d / "stack.lock.toml").is_file()}


def _resolved(step: Path) -> bool:
    """The step ran the resolver (uv writes resolve.log; a kept closure writes none)."""
    return (step / "logs" / "resolve.log").is_file()


def test_a_bisect_resolves_once_per_requirement_change_and_reruns_offline(ws, make_repo, tmp_path):
    """kern needs `packaging` from an index on 127.0.0.1; c0..c7, c5 makes VALUE wrong. First bisect: every
    commit has its own version (1.0.0.devN) but none changes a requirement, so of its builds (both ends and the steps) exactly one resolves, and the index is
    asked only then. A rerun into a new --out with the index stopped builds nothing, resolves nothing and still
    names c5. A second history adds `tomli` to the requirements at c6: the steps before c6 share one closure,
    those from c6 on resolve again, once."""
    repo = make_repo("kern", "tiny")
    base = (repo.path / "pyproject.toml").read_text()

    def pyproject(deps: str, version: str = "1.0.0") -> str:
        return base.replace('version = "1.0.0"', f'version = "{version}"\ndependencies = [{deps}]')

    # the version moves at every commit, as setuptools-scm's does: no requirement changes
    plain = [repo.commit(f"kern change {i}", {"tiny/value.py": f"VALUE = {41 if i >= FIRST_BAD else 42}\n",
                                              "pyproject.toml": pyproject('"packaging>=24"', f"1.0.0.dev{i}")})
             for i in range(LAST + 1)]
    index = CountingIndex(simple_index(wheelhouse(tmp_path / "wheels"), tmp_path / "index").parent)
    ws.recipe("net", recipe_data({"kern": component(repo, plain[-1], dist="tiny")},
                                 resolve={"indexes": [f"{index.url}/simple"]}))
    (ws.root / "check.py").write_text(CHECK)

    def bisect(out: str, good: str, bad: str):
        return ws.cli("bisect", "--recipe", "net", "--component", "kern", "--good", good, "--bad", bad,
                      "--cache-dir", ws.cache, "--out", ws.root / out, "--jobs", "1",
                      "--test-cmd", f"{sys.executable} check.py", "--test-needs-closure", "--json")

    with index:
        r = bisect("o1", plain[0], plain[-1])
        assert r.returncode == 0, str(r)
        assert r.json()["result"]["first_bad"]["key"] == plain[FIRST_BAD]
        steps = _steps(ws.root / "o1")
        assert len(steps) >= 4, steps  # both ends and at least two steps: each could have resolved
        resolved = [name for name, d in steps.items() if _resolved(d)]
        assert len(resolved) == 1, (resolved, sorted(steps))
        asked = index.count()
        assert asked > 0 and any("/simple/packaging/" in p for p in index.requests), index.requests
        closures = {name: read_lock(d / "stack.lock.toml").closure for name, d in steps.items()}
        assert all(c is not None and [x.name for x in c.dists] == ["packaging"] for c in closures.values()), closures
        assert len({c.resolved_at for c in closures.values() if c is not None}) == 1, closures  # one resolution
        # the steps after the first resolution asked the index nothing: one resolution's worth of requests
        per_resolution = asked

    # the same bisect again, everything cached, the index stopped (the network off): nothing built, resolved
    # or asked, the same answer
    r = bisect("o2", plain[0], plain[-1])
    assert r.returncode == 0, str(r)
    assert r.json()["result"]["first_bad"]["key"] == plain[FIRST_BAD]
    assert not any(_resolved(d) for d in _steps(ws.root / "o2").values())
    assert index.count() == asked

    # a history where c6 adds a requirement: the builds before c6 share one closure, those after resolve
    # again, once (the index is back, on a new port: the recipe's [resolve] changes, so its own first key)
    later = [repo.commit(f"kern change {i}", {
        "tiny/value.py": f"VALUE = {41 if i >= LAST + 1 + FIRST_BAD else 42}  # {i}\n",
        "pyproject.toml": pyproject('"packaging>=24", "tomli"' if i >= LAST + 1 + 6 else '"packaging>=24"')})
        for i in range(LAST + 1, 2 * (LAST + 1))]
    with CountingIndex(tmp_path / "index") as index2:
        ws.recipe("net", recipe_data({"kern": component(repo, later[-1], dist="tiny")},
                                     resolve={"indexes": [f"{index2.url}/simple"]}))
        r = bisect("o3", later[0], later[-1])
        assert r.returncode == 0, str(r)
        assert r.json()["result"]["first_bad"]["key"] == later[FIRST_BAD]
        steps = _steps(ws.root / "o3")
        locked = {name: read_lock(d / "stack.lock.toml").closure for name, d in steps.items()}
        names = {name: [x.name for x in c.dists] if c is not None else None for name, c in locked.items()}
        changed = {later[i][:12] for i in range(6, LAST + 1)}
        assert later[-1][:12] in steps and later[0][:12] in steps  # both ends built: both closures met
        for name, dists in names.items():
            assert dists == (["packaging", "tomli"] if name in changed else ["packaging"]), names
        resolved = sorted(name for name, d in steps.items() if _resolved(d))
        assert len(resolved) == 2, (resolved, sorted(steps))  # once per distinct requirement set
        assert len({name in changed for name in resolved}) == 2, resolved
        assert any("/simple/tomli/" in p for p in index2.requests), index2.requests
        assert index2.count() <= 2 * per_resolution + 4, (index2.count(), per_resolution, index2.requests)
