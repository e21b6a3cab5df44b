"""Per-commit prebuilt wheels for bisect: a component's `prebuilt-index` (here a PEP 503 index served over HTTP
on 127.0.0.1) holds wheels whose local version names their commit (`+g<hex>`, as setuptools-scm and vLLM's
per-commit wheels do). A step whose commit has one downloads it, sha256 checked, and compiles nothing; only
the commits without one are built, and the report counts both."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.spine_helpers import component, recipe_data
from tests.support.closure import served, simple_index
from toolchain.build.prebuilt_wheels import PrebuiltFile, commit_wheel
from toolchain.core.fs import sha256_file
from toolchain.lock import read_lock

pytestmark = pytest.mark.slow

TEST = """\
import os, sys, zipfile
wheel = [w for w in os.environ["TOOLCHAIN_BISECT_WHEELS"].split(os.pathsep) if os.path.basename(w).startswith("tiny-")]
sys.exit(0 if "42" in zipfile.ZipFile(wheel[0]).read("tiny/value.py").decode() else 1)
"""
FIRST_BAD = 5


def _commit_wheel(repo: Path, commit: str, work: Path, dest: Path) -> Path:
    """The wheel a per-commit CI job would publish: `commit` built with its hash as the local version."""
    tree = work / commit[:12]
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "--quiet", str(tree), commit], check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", str(tree),
                    "-w", str(dest)], check=True, timeout=300,
                   env={**__import__("os").environ, "SETUPTOOLS_SCM_PRETEND_VERSION": f"1.0.0+g{commit[:12]}"})
    return next(dest.glob(f"tiny-1.0.0+g{commit[:12]}-*.whl"))


def test_a_bisect_with_half_the_range_prebuilt_compiles_only_the_other_half(ws, make_repo, tmp_path):
    kern = make_repo("kern", "tiny")
    commits = [kern.commit("add value", {"tiny/value.py": "VALUE = 42\n"})]
    for i in range(1, 9):
        commits.append(kern.commit(f"kern change {i}", {"tiny/value.py": f"VALUE = {41 if i >= FIRST_BAD else 42}  # {i}\n"}))
    with_wheel = set(commits[0::2])  # half of the range, both ends included
    wheels = tmp_path / "wheels"
    for c in sorted(with_wheel):
        _commit_wheel(kern.path, c, tmp_path / "trees", wheels)
    simple_index(wheels, tmp_path / "index")
    other = make_repo("other", "distname")
    script = ws.root / "repro.py"
    script.write_text(TEST)
    counter = ws.root / "builds.txt"
    with served(tmp_path / "index") as url:
        ws.recipe("stack", recipe_data({"other": component(other, dist="other-name"),
                                        "kern": component(kern, commits[-1], after=["other"], dist="tiny",
                                                          **{"prebuilt-index": f"{url}/simple"})}))
        assert ws.build("stack").returncode == 0  # a user's cache: `other` (unchanged at every step) is there
        r = ws.cli("bisect", "--recipe", "stack", "--component", "kern", "--good", commits[0], "--cache-dir",
                   ws.cache, "--out", ws.root / "bisect", "--jobs", "1", "--test-cmd", f"{sys.executable} {script}",
                   "--json", env={"TINY_BUILD_COUNTER": str(counter)})
    assert r.returncode == 0, str(r)
    doc = r.json()
    data = doc["result"]
    assert data["first_bad"]["key"] == commits[FIRST_BAD]
    steps = data["steps"]
    assert steps
    assert {s["key"] for s in steps} & with_wheel
    assert {s["key"] for s in steps} - with_wheel
    for s in steps:  # a step takes the commit's wheel when there is one, and compiles otherwise
        assert (s["source"] == "prebuilt") == (s["key"] in with_wheel), s
    compiled_kern = [line for line in counter.read_text().splitlines() if line.startswith("tiny ")]
    built = {s["key"] for s in steps + data["checks"]}  # the steps and the two ends, checked first
    assert len(compiled_kern) == len(built - with_wheel), (compiled_kern, steps)
    assert doc["wheels"]["prebuilt"] == sum(s["key"] in with_wheel for s in steps)
    assert doc["wheels"]["prebuilt"] + doc["wheels"]["compiled"] + doc["wheels"]["cached"] == len(steps)
    # the good end's lock records the per-commit wheel as prebuilt, with its commit and where it came from
    good = read_lock(ws.root / "bisect" / "good" / "stack.lock.toml")
    kern_locked = good.component("kern")
    if data["last_good"]["key"] in with_wheel:
        assert kern_locked.prebuilt["url"].startswith(url)
        assert kern_locked.commit == data["last_good"]["key"]
        assert kern_locked.wheel.file.startswith(f"tiny-1.0.0+g{kern_locked.commit[:12]}-")
    else:
        assert not kern_locked.prebuilt


def test_a_commit_wheel_is_found_on_an_index_page_a_find_links_page_or_a_folder(tmp_path):
    """The three forms a prebuilt-index takes, read with pypi-simple over HTTP on 127.0.0.1 (a PEP 503 project
    page, a find-links page) or listed (a folder): the wheel whose local version names the commit, with the
    sha256 the page gives (a folder's file is hashed); a file without a known sha256 is not taken."""
    commit = "1a2b3c4d5e6f" + "0" * 28
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    names = [f"tiny-0.1.dev3+g{commit[:12]}-py3-none-any.whl", "tiny-0.1.dev2+g9f9f9f9f9f9f-py3-none-any.whl",
             f"other-0.1+g{commit[:12]}-py3-none-any.whl"]
    for name in names:
        (wheels / name).write_bytes(name.encode())
    simple_index(wheels, tmp_path / "index")
    sha = sha256_file(wheels / names[0])
    (tmp_path / "index" / "links.html").write_text(
        "<html><body>" + "".join(f'<a href="files/{n}#sha256={sha256_file(wheels / n)}">{n}</a>' for n in names)
        + f'<a href="files/{names[0]}-nohash.whl">no hash</a></body></html>')
    with served(tmp_path / "index") as url:
        on_index = commit_wheel(f"{url}/simple", "Tiny", commit, "tiny@1a2b")
        on_page = commit_wheel(f"{url}/links.html", "tiny", commit, "tiny@1a2b")
        assert commit_wheel(f"{url}/simple", "tiny", "f" * 40, "tiny@ffff") is None
        assert commit_wheel(f"{url}/nothing-here", "tiny", commit, "tiny@1a2b") is None  # 404, then 404
    assert on_index == PrebuiltFile(names[0], f"{url}/files/{names[0]}", sha, index=f"{url}/simple")
    assert on_page == PrebuiltFile(names[0], f"{url}/files/{names[0]}", sha, index=f"{url}/links.html")
    in_folder = commit_wheel(str(wheels), "tiny", commit, "tiny@1a2b")
    assert in_folder == PrebuiltFile(names[0], (wheels / names[0]).resolve().as_uri(), sha, index=str(wheels))
