"""Lock-to-lock: the ordered differences between two real lock files, applied one at a time, and the
hand-off of a component's commit range (a real git repository with merges) to the bisect core."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.spine_helpers import GitRepo
from toolchain.bisect.candidates import CommitRange, git_candidates
from toolchain.bisect.core import BuildOutcome, Verdict
from toolchain.bisect.lockdiff import (
    MISSING,
    bisect_locks,
    environment_notes,
    lock_differences,
    option_groups,
    prefix_candidates,
    prefix_data,
    stack_data,
)
from toolchain.bisect.state import StateFile
from toolchain.build.cache import WheelRef
from toolchain.core import toml as tomlio
from toolchain.core.fs import sha256_file
from toolchain.core.proc.runner import run
from toolchain.errors import RecipeError
from toolchain.lock import Lock, LockedComponent, read_lock, write_lock
from toolchain.recipe import load as recipes
from toolchain.recipe.model import Patch
from toolchain.target.facts import TargetInfo, ToolchainInfo

COMPONENTS = ("vllm", "vllm-xpu-kernels", "ark")


def recipe_data(kern_url: str, kern_commit: str, *, bad: bool) -> dict[str, Any]:
    sha = {"vllm": "1" * 40, "ark": "3" * 40}
    data: dict[str, Any] = {
        "description": "B70 stack",
        "toolchain": {"setvars": ""},
        "target": {"runtime": "host", "python": "python3"},
        "env": {"MAX_JOBS": "4" if bad else "2"},
        "components": {
            "vllm": {"url": "https://github.com/vllm-project/vllm.git", "ref": "main", "commit": sha["vllm"],
                     "env": {"VLLM_TARGET_DEVICE": "xpu"}},
            "vllm-xpu-kernels": {"url": kern_url, "commit": kern_commit, "after": ["vllm"]},
            "ark": {"url": "https://github.com/intel/auto-round.git", "commit": sha["ark"],
                    "subdir": "auto_round_extension/ark", "after": ["vllm"]},
        },
        "smoke": {"model": "Intel/Qwen3-8B-int4-AutoRound", "device": "b70",
                  "serve-args": ["--enforce-eager", "--max-model-len", "2048"],
                  "env": {"VLLM_XPU_INC_WNA16_BACKEND": "w4a16"}},
    }
    if bad:
        c = data["components"]
        c["vllm"]["ref"] = "v0.99"  # informational: not a difference
        c["vllm"]["patches"] = ["vllm/0001-gdn-outproj-weight-getattr.patch"]
        c["vllm"]["env"]["VLLM_USE_V2"] = "1"
        c["ark"]["command"] = ["{python}", "-m", "pip", "wheel", "--no-deps", "{src}", "-w", "{out}"]
        data["smoke"]["env"]["VLLM_XPU_INC_WNA16_BACKEND"] = "ark"
        data["smoke"]["serve-args"] = ["--max-model-len", "4096", "--kv-cache-dtype", "fp8"]
    return data


def write_stack_lock(out: Path, data: dict, *, oneapi: str = "2025.2") -> Lock:
    comps = []
    for name in COMPONENTS:
        c = data["components"][name]
        wheel = out / "wheels" / f"{name.replace('-', '_')}-0.1-py3-none-any.whl"
        wheel.parent.mkdir(parents=True, exist_ok=True)
        wheel.write_bytes(f"{name} {c['commit']}".encode())
        comps.append(LockedComponent(
            name=name, url=c["url"], ref=c.get("ref", ""), commit=c["commit"], describe="", subdir=c.get("subdir", ""),
            after=tuple(c.get("after", ())), dist=name, import_name=name, version="0.1", install_args=(),
            patches=tuple(Patch(p, "ab" * 32) for p in c.get("patches", ())), env=c.get("env", {}),
            command=tuple(c.get("command", recipes.DEFAULT_COMMAND)), cache_key="ab" * 32, build_seconds=1.0,
            wheel=WheelRef(wheel.name, sha256_file(wheel), wheel.stat().st_size)))
    lock = Lock(recipe_name="b70", recipe_path=str(out.parent / "recipes" / "b70.toml"), recipe_sha256="0" * 64,
                recipe_text=tomlio.dumps(data), toolchain=ToolchainInfo(oneapi_version=oneapi),
                target=TargetInfo(python_version="3.12.3"), smoke=data["smoke"], components=tuple(comps))
    return read_lock(write_lock(lock, out))


@pytest.fixture
def kernels(tmp_path: Path):
    """vllm-xpu-kernels history: k0..k9 on main with a merged branch; k6 (a first-parent commit) breaks it."""
    r = GitRepo.create(tmp_path / "kernels", tag=None)
    c = {"k0": r.commit("k0", {"kern.c": "int v(void){return 42;}\n"})}
    for i in range(1, 10):
        if i == 4:
            r.git("checkout", "-q", "-b", "feature")
            r.commit("feature: a", {"feature.c": "a\n"})
            r.commit("feature: b", {"feature.c": "b\n"})
            r.git("checkout", "-q", "main")
            c["k4"] = r.merge("feature", "Merge feature")
            continue
        c[f"k{i}"] = r.commit(f"k{i}", {"kern.c": f"int v(void){{return {41 if i >= 6 else 42};}} /* {i} */\n"})
    return r, c


@pytest.fixture
def locks(tmp_path: Path, kernels):
    r, c = kernels
    (tmp_path / "patches" / "vllm").mkdir(parents=True)
    (tmp_path / "patches" / "vllm" / "0001-gdn-outproj-weight-getattr.patch").write_text("--- a\n+++ b\n")
    good = write_stack_lock(tmp_path / "good", recipe_data(str(r.path), c["k0"], bad=False))
    bad = write_stack_lock(tmp_path / "bad", recipe_data(str(r.path), c["k9"], bad=True), oneapi="2025.3")
    return good, bad


def test_differences_in_dependency_order(locks, kernels):
    good, bad = locks
    _, c = kernels
    diffs = lock_differences(good, bad)
    assert [(d.kind, d.component, ".".join(d.path), d.option) for d in diffs] == [
        ("build-env", "", "env.MAX_JOBS", ""),
        ("patches", "vllm", "components.vllm.patches", ""),
        ("env", "vllm", "components.vllm.env.VLLM_USE_V2", ""),
        ("commit", "vllm-xpu-kernels", "components.vllm-xpu-kernels.commit", ""),
        ("command", "ark", "components.ark.command", ""),
        ("serve-env", "", "smoke.env.VLLM_XPU_INC_WNA16_BACKEND", ""),
        ("serve-args", "", "smoke.serve-args", "--enforce-eager"),
        ("serve-args", "", "smoke.serve-args", "--max-model-len"),
        ("serve-args", "", "smoke.serve-args", "--kv-cache-dtype"),
    ]
    assert diffs[2].good is MISSING
    assert diffs[2].bad == "1"
    assert diffs[3].label == f"vllm-xpu-kernels: commit {c['k0'][:12]} -> {c['k9'][:12]}"
    assert diffs[6].label == "smoke.serve-args --enforce-eager: --enforce-eager -> (unset)"
    assert [c.key for c in prefix_candidates(diffs)] == [f"d{i}" for i in range(10)]


def test_applying_every_difference_gives_the_bad_side_and_each_prefix_is_a_valid_recipe(locks, tmp_path: Path):
    good, bad = locks
    diffs = lock_differences(good, bad)
    base, target = stack_data(good), stack_data(bad)
    target["components"]["vllm"]["ref"] = "main"  # ref is informational and never applied
    assert prefix_data(base, diffs, len(diffs)) == target
    assert prefix_data(base, diffs, 0) == base
    before = copy.deepcopy(base)
    for i in range(len(diffs) + 1):
        data = prefix_data(base, diffs, i)
        loaded = recipes.validated(data, name="b70", path=tmp_path / "recipes" / "b70.toml",
                                   patches_dir=tmp_path / "patches")
        assert [x.name for x in loaded.components] == ["vllm", "vllm-xpu-kernels", "ark"]
    assert base == before  # applying never changes its input
    third = prefix_data(base, diffs, 3)
    assert third["env"]["MAX_JOBS"] == "4"
    assert third["components"]["vllm"]["env"]["VLLM_USE_V2"] == "1"
    assert third["components"]["vllm-xpu-kernels"]["commit"] == base["components"]["vllm-xpu-kernels"]["commit"]
    assert prefix_data(base, diffs, 7)["smoke"]["serve-args"] == ["--max-model-len", "2048"]
    assert prefix_data(base, diffs, 8)["smoke"]["serve-args"] == ["--max-model-len", "4096"]


def test_option_groups():
    assert option_groups(["m", "--a", "1", "-x", "--b=2", "--c", "-1", "3"]) == {
        "": ["m"], "--a": ["--a", "1"], "-x": ["-x"], "--b": ["--b=2"], "--c": ["--c", "-1", "3"]}


def never(*args: object) -> NoReturn:
    pytest.fail("the same stack twice: nothing is built or listed")


def test_environment_notes_and_identical_locks(locks, tmp_path: Path):
    good, bad = locks
    notes = environment_notes(good, bad)
    assert notes == ["oneAPI version differs: 2025.2 -> 2025.3 (not swapped: it is the build machine's, "
                     "not the recipe's)"]
    tester = Broken(tmp_path, "")
    with pytest.raises(RecipeError, match="same stack"):
        bisect_locks(good, good, never, tester, never)
    assert tester.calls == []


class DataBuilder:
    """Records the recipe table of every build; the 'lock' is that table as JSON."""

    def __init__(self, out: Path, log: list) -> None:
        self.out, self.log = out, log

    def make(self, phase, derive, component):
        outer = self

        class B:
            def build(self, key):
                data = derive(key)
                outer.log.append((phase, key, data))
                assert component == ("vllm-xpu-kernels" if phase == "commits" else "")
                path = outer.out / phase / f"{key[:12]}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(data))
                return BuildOutcome(True, lock_path=path)

        return B()


def is_change_key(key: str) -> bool:
    """A candidate of phase "changes" (d0, d1, ...), not a commit (whose hex id may start with a d)."""
    return re.fullmatch(r"d\d+", key) is not None


class Broken:
    """Bad when the kernels commit contains k6 (asked of git) or, optionally, when serve env says ark."""

    def __init__(self, repo: Path, culprit: str, *, backend: bool = False, interrupt_in: str = "") -> None:
        self.repo, self.culprit, self.backend, self.interrupt_in = repo, culprit, backend, interrupt_in
        self.calls: list[str] = []

    def test(self, cand, build):
        self.calls.append(cand.key)
        if self.interrupt_in and not is_change_key(cand.key):
            raise KeyboardInterrupt
        if build.lock_path.suffix != ".json":  # one of the two given locks: never tested
            raise AssertionError(f"tested a given end {cand.key}")
        data = json.loads(build.lock_path.read_text())
        if self.backend:
            return Verdict.BAD if data["smoke"]["env"]["VLLM_XPU_INC_WNA16_BACKEND"] == "ark" else Verdict.GOOD
        commit = data["components"]["vllm-xpu-kernels"]["commit"]
        done = run(["git", "-C", str(self.repo), "merge-base", "--is-ancestor", self.culprit, commit],
                   capture=True, check=False)
        return Verdict.BAD if done.returncode == 0 else Verdict.GOOD


def test_lock_bisect_finds_the_commit_change_then_the_first_bad_commit(locks, kernels, tmp_path: Path):
    good, bad = locks
    r, c = kernels
    built: list = []
    tester = Broken(r.path, c["k6"])
    result = bisect_locks(good, bad, DataBuilder(tmp_path / "b", built).make, tester,
                          lambda comp, url, g, b: every_commit(r.path, g, b, url))
    assert result.culprit is not None and result.commits is not None
    assert result.culprit.kind == "commit"
    assert result.culprit.component == "vllm-xpu-kernels"
    changes, commits = result.changes, result.commits
    assert changes.last_good is not None and changes.first_bad is not None
    assert commits.first_bad is not None and commits.last_good is not None
    assert changes.last_good.key == "d3"
    assert changes.first_bad.key == "d4"
    assert commits.first_bad.key == c["k6"]
    assert commits.last_good.key == c["k5"]
    feature = run(["git", "-C", str(r.path), "rev-parse", "feature"], capture=True).stdout.strip()
    commit_builds = [data for phase, key, data in built if phase == "commits"]
    assert commit_builds
    assert feature not in {d["components"]["vllm-xpu-kernels"]["commit"] for d in commit_builds}
    for data in commit_builds:  # the differences before the culprit are applied, those after are not
        assert data["env"]["MAX_JOBS"] == "4"
        assert data["components"]["vllm"]["env"]["VLLM_USE_V2"] == "1"
        assert "command" not in data["components"]["ark"]
        assert data["smoke"]["env"]["VLLM_XPU_INC_WNA16_BACKEND"] == "w4a16"
    assert result.notes
    assert result.to_dict()["culprit"]["kind"] == "commit"
    good_build = result.changes.good_build
    assert good_build is not None and good_build.lock_path is not None
    assert good_build.lock_path.name == "d3.json"  # the ends of phase 1 are its builds


def every_commit(repo: Path, good: str, bad: str, url: str) -> CommitRange:
    """Every first-parent commit of the range a candidate (as --every-commit)."""
    cands = git_candidates(repo, good, bad, url)
    return CommitRange(cands, cands)


def test_lock_bisect_over_a_components_trees_names_the_first_bads_parent_last_good(locks, kernels, tmp_path: Path):
    """The commit phase over candidates that leave out a commit keeping the component's tree as it was (k5,
    as distinct_trees does): the first bad is the same, and its last good the first bad's parent, as
    `git bisect` names it (not k4, the last good candidate)."""
    good, bad = locks
    r, c = kernels

    def trees(comp: str, url: str, g: str, b: str) -> CommitRange:
        everyone = git_candidates(r.path, g, b, url)
        return CommitRange(tuple(x for x in everyone if x.key != c["k5"]), everyone)

    tester = Broken(r.path, c["k6"])
    result = bisect_locks(good, bad, DataBuilder(tmp_path / "b", []).make, tester, trees)
    commits = result.commits
    assert commits is not None and commits.first_bad is not None
    assert commits.first_bad.key == c["k6"]
    assert c["k5"] not in tester.calls  # never a candidate
    assert commits.last_good.key == c["k5"], commits.last_good


def test_lock_bisect_finds_a_serve_env_change_without_a_commit_phase(locks, kernels, tmp_path: Path):
    good, bad = locks
    r, _ = kernels
    result = bisect_locks(good, bad, DataBuilder(tmp_path / "b", []).make, Broken(r.path, "", backend=True),
                          lambda *a: pytest.fail("no commit phase for a serve env change"))
    assert result.culprit is not None
    assert result.culprit.kind == "serve-env"
    assert result.commits is None
    first_bad, bad_build = result.changes.first_bad, result.changes.bad_build
    assert first_bad is not None and bad_build is not None and bad_build.lock_path is not None
    assert first_bad.key == "d6"
    assert bad_build.lock_path.name == "d6.json"


def test_lock_bisect_resumes_in_the_commit_phase(locks, kernels, tmp_path: Path):
    good, bad = locks
    r, c = kernels
    sf = StateFile(tmp_path / "state.json")
    commits = lambda comp, url, g, b: every_commit(r.path, g, b, url)
    first = Broken(r.path, c["k6"], interrupt_in="commits")
    with pytest.raises(KeyboardInterrupt):
        bisect_locks(good, bad, DataBuilder(tmp_path / "b", []).make, first, commits, state_file=sf)
    changes = StateFile(sf.path).load("changes")
    assert changes is not None and changes.finished
    assert StateFile(sf.path).load("commits") is not None
    second = Broken(r.path, c["k6"])
    result = bisect_locks(good, bad, DataBuilder(tmp_path / "b", []).make, second, commits, state_file=StateFile(sf.path))
    assert result.commits is not None and result.commits.first_bad is not None
    assert result.commits.first_bad.key == c["k6"]
    assert not any(is_change_key(k) for k in second.calls)  # phase 1 is not repeated
