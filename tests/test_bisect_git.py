"""Candidates from real git repositories (commits and merges, so first-parent matters), bisected end to end
with real processes: builds read the commit from git, tests are commands with `git bisect run` semantics."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.spine_helpers import GitRepo
from toolchain.bisect.candidates import adjacent_good, commit_url, distinct_trees, git_candidates, resolve_commit
from toolchain.bisect.core import (
    Bisector,
    BuildOutcome,
    Candidate,
    Verdict,
)
from toolchain.bisect.testers import CommandTester
from toolchain.core.proc.runner import run
from toolchain.errors import SourceError, UsageError


@pytest.fixture
def history(tmp_path: Path):
    """main: m0 m1 m1b m2 m3 M(merge of side: s1 s2, forked at m1) m5 m6; branch `other` from m2: o1 (never
    merged). value.txt holds the answer a build gives; s2 breaks it (so the first bad first-parent commit is
    M); m2 does not build (m3 fixes that)."""
    r = GitRepo.create(tmp_path / "kern", tag=None)
    c = {"m0": r.commit("initial", {"value.txt": "42\n", "notes.txt": "0\n"})}
    c["m1"] = r.commit("[kernels] tune tiles", {"notes.txt": "1\n"})
    r.git("checkout", "-q", "-b", "side")
    c["s1"] = r.commit("side: refactor", {"side.txt": "1\n"})
    c["s2"] = r.commit("side: fast path", {"value.txt": "41\n"})
    r.git("checkout", "-q", "main")
    c["m1b"] = r.commit("more tuning", {"notes.txt": "1b\n"})
    c["m2"] = r.commit("break the build", {"notes.txt": "BROKEN\n"})
    r.git("checkout", "-q", "-b", "other")
    c["o1"] = r.commit("other: experiment", {"other.txt": "x\n"})
    r.git("checkout", "-q", "main")
    c["m3"] = r.commit("fix the build", {"notes.txt": "3\n"})
    c["M"] = r.merge("side", "Merge branch 'side'")
    c["m5"] = r.commit("docs", {"docs.txt": "5\n"})
    c["m6"] = r.commit("more docs", {"docs.txt": "6\n"})
    return r, c


def test_first_parent_candidates_oldest_first_with_metadata(history):
    r, c = history
    got = git_candidates(r.path, c["m0"], c["m6"], "https://github.com/vllm-project/vllm-xpu-kernels.git")
    assert [x.key for x in got] == [c[k] for k in ("m0", "m1", "m1b", "m2", "m3", "M", "m5", "m6")]  # no s1, s2, o1
    assert got[1].subject == "[kernels] tune tiles"
    assert got[1].date == r.git("show", "-s", "--format=%cI", c["m1"]).strip()
    assert [x.merge for x in got] == [False, False, False, False, False, True, False, False]
    assert got[-1].url == f"https://github.com/vllm-project/vllm-xpu-kernels/commit/{c['m6']}"
    expected = run(["git", "-C", str(r.path), "rev-list", "--first-parent", "--reverse", f"{c['m0']}..{c['m6']}"],
                   capture=True).stdout.split()
    assert [x.key for x in got[1:]] == expected


def test_candidates_from_a_bare_mirror_and_short_shas(history, tmp_path: Path):
    r, c = history
    mirror = tmp_path / "mirror.git"
    run(["git", "clone", "-q", "--bare", str(r.path), str(mirror)], capture=True)
    got = git_candidates(mirror, c["m1"][:10], c["m5"][:10])
    assert [x.key for x in got] == [c["m1"], c["m1b"], c["m2"], c["m3"], c["M"], c["m5"]]
    assert all(x.url == "" for x in got)  # a local repository has no web URL


def test_range_errors(history):
    r, c = history
    with pytest.raises(UsageError, match="not an ancestor"):
        git_candidates(r.path, c["o1"], c["m6"])
    with pytest.raises(UsageError, match="reversed") as err:
        git_candidates(r.path, c["m6"], c["m0"])
    assert "swap --good and --bad" in (err.value.hint or "")
    with pytest.raises(UsageError, match="same commit"):
        git_candidates(r.path, c["m5"], c["m5"][:12])
    with pytest.raises(SourceError, match="not a commit"):
        resolve_commit(r.path, "0" * 40)


def test_commit_urls():
    sha = "a" * 40
    assert commit_url("https://github.com/intel/auto-round.git", sha) == f"https://github.com/intel/auto-round/commit/{sha}"
    assert commit_url("git@github.com:intel/auto-round.git", sha) == f"https://github.com/intel/auto-round/commit/{sha}"
    assert commit_url("ssh://git@gitlab.example.com:2222/g/p.git", sha) == f"https://gitlab.example.com/g/p/-/commit/{sha}"
    assert commit_url("https://gitlab.com/g/p/", sha) == f"https://gitlab.com/g/p/-/commit/{sha}"
    assert commit_url("file:///srv/git/p.git", sha) == ""
    assert commit_url("/srv/git/p", sha) == ""


class GitBuilder:
    """Builds a commit by reading value.txt from git; a commit whose notes say BROKEN does not build."""

    def __init__(self, repo: Path, out: Path) -> None:
        self.repo, self.out = repo, out
        self.calls: list[str] = []

    def build(self, key: str) -> BuildOutcome:
        self.calls.append(key)
        notes = run(["git", "-C", str(self.repo), "show", f"{key}:notes.txt"], capture=True).stdout
        if "BROKEN" in notes:
            return BuildOutcome(False, reason="notes.txt: BROKEN")
        wheel = self.out / f"kern-{key[:12]}.whl"
        wheel.parent.mkdir(parents=True, exist_ok=True)
        wheel.write_text(run(["git", "-C", str(self.repo), "show", f"{key}:value.txt"], capture=True).stdout)
        return BuildOutcome(True, wheels=(wheel,), lock_path=self.out / "stack.lock.toml")


TEST_SCRIPT = """\
import os, sys
wheels = os.environ["TOOLCHAIN_BISECT_WHEELS"].split(os.pathsep)
assert os.environ["TOOLCHAIN_BISECT_COMMIT"][:12] in wheels[0], "the wheel of another commit"
assert os.environ["TOOLCHAIN_BISECT_LOCK"].endswith("stack.lock.toml")
sys.exit(0 if open(wheels[0]).read().strip() == "42" else 1)
"""


def test_bisect_a_real_history_with_a_real_test_command(history, tmp_path: Path):
    r, c = history
    script = tmp_path / "repro.py"
    script.write_text(TEST_SCRIPT)
    builder = GitBuilder(r.path, tmp_path / "wheels")
    tester = CommandTester([sys.executable, str(script)], tmp_path / "logs", timeout=60)
    result = Bisector(git_candidates(r.path, c["m0"], c["m6"]), builder, tester).run()
    # s2 broke it on the side branch; on the first-parent line the merge is the first bad commit
    assert result.first_bad is not None and result.last_good is not None
    assert result.first_bad.key == c["M"]
    assert result.first_bad.merge
    assert result.last_good.key == c["m3"]
    assert [(x.key, why) for x, why in result.skipped] == [(c["m2"], "build failed: notes.txt: BROKEN")]
    assert c["s2"] not in builder.calls
    assert c["s1"] not in builder.calls
    logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert logs == sorted(f"{s.key[:12]}.log" for s in result.steps if not s.build_failed)


def test_bisect_inside_the_merged_branch(history, tmp_path: Path):
    """The hint for a merge: --good M^1 --bad M bisects the branch it brought in."""
    r, c = history
    script = tmp_path / "repro.py"
    script.write_text(TEST_SCRIPT)
    cands = git_candidates(r.path, f"{c['M']}^1", c["M"])
    assert [x.key for x in cands] == [c["m3"], c["M"]]  # first-parent: the merge is one step
    side = git_candidates(r.path, c["m1"], c["s2"])
    result = Bisector(side, GitBuilder(r.path, tmp_path / "w"),
                      CommandTester([sys.executable, str(script)], tmp_path / "logs")).run()
    assert result.first_bad is not None
    assert result.first_bad == Candidate(c["s2"], "side: fast path", result.first_bad.date)
    assert result.steps[0].verdict is Verdict.GOOD  # s1


@pytest.fixture
def monorepo(tmp_path: Path):
    """A component in ext/ of a larger repository: most commits change the rest. ext/value.txt: 42 until x2
    makes it 41 (the bug); a1..a4 change only other folders, x1 only ext/notes.txt, an empty commit e1."""
    r = GitRepo.create(tmp_path / "mono", tag=None)
    c = {"g": r.commit("initial", {"ext/value.txt": "42\n", "ext/notes.txt": "0\n", "lib/a.py": "0\n"})}
    c["a1"] = r.commit("lib: one", {"lib/a.py": "1\n"})
    c["x1"] = r.commit("ext: notes", {"ext/notes.txt": "1\n"})
    c["a2"] = r.commit("lib: two", {"lib/a.py": "2\n"})
    c["e1"] = r.commit("empty")
    c["x2"] = r.commit("ext: the bug", {"ext/value.txt": "41\n"})
    c["a3"] = r.commit("lib: three", {"lib/a.py": "3\n"})
    c["a4"] = r.commit("docs", {"README": "x\n"})
    return r, c


class SubtreeBuilder(GitBuilder):
    def build(self, key: str) -> BuildOutcome:
        self.calls.append(key)
        wheel = self.out / f"kern-{key[:12]}.whl"
        wheel.parent.mkdir(parents=True, exist_ok=True)
        wheel.write_text(run(["git", "-C", str(self.repo), "show", f"{key}:ext/value.txt"], capture=True).stdout)
        return BuildOutcome(True, wheels=(wheel,), lock_path=self.out / "stack.lock.toml")


def test_only_the_commits_that_change_the_subtree_are_candidates(monorepo, tmp_path: Path):
    r, c = monorepo
    every = git_candidates(r.path, c["g"], c["a4"])
    assert len(every) == 8
    got = distinct_trees(r.path, every, "ext")
    # the good end, then each commit that changed ext/; the bad end a4 is x2's tree: x2 stands for it
    assert [x.key for x in got] == [c["g"], c["x1"], c["x2"]]
    assert got[-1].subject == "ext: the bug"
    # the root: every commit that changes anything (the empty one builds what a2 built)
    assert [x.key for x in distinct_trees(r.path, every, "")] == [c[k] for k in ("g", "a1", "x1", "a2", "x2", "a3",
                                                                                  "a4")]
    with pytest.raises(UsageError, match="ext/ is the same at --good") as err:
        distinct_trees(r.path, git_candidates(r.path, c["x2"], c["a4"]), "ext")
    assert "--every-commit" in (err.value.hint or "")
    # bisected over its trees, the bug is found with fewer builds than over every commit, and is the same commit
    script = tmp_path / "repro.py"
    script.write_text(TEST_SCRIPT)
    found = {}
    for name, cands in (("every", every), ("trees", got)):
        builder = SubtreeBuilder(r.path, tmp_path / name)
        result = adjacent_good(Bisector(cands, builder, CommandTester([sys.executable, str(script)],
                                                                      tmp_path / f"logs-{name}"),
                                        check_ends=True).run(), every)
        assert result.first_bad is not None
        found[name] = (result.first_bad.key, result.last_good.key, len(builder.calls))
    # the same commit, and the same last good: the first bad's parent (e1, whose ext/ x1 made), as git names it
    assert found["every"][:2] == found["trees"][:2] == (c["x2"], c["e1"]), found
    assert found["trees"][2] < found["every"][2], found
