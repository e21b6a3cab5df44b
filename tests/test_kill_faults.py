"""Faults (issue 14): SIGKILL at random moments of fetch, checkout, patch, build and cache write, then the next
build succeeds with wheels identical (sha256) to a clean build; a mirror whose fetch was killed is fetched
again before its refs are used, and `--fresh-sources` repairs a damaged mirror; a full disk under the cache
is a clean error.

The fixture is shaped like the real stack where it matters here: the version comes from `git describe`
(a mirror without its tags gives another version, or no build at all), a local patch is applied, and the
repository carries an incompressible blob so that fetch, checkout and cache write take measurable time.
Kills are real: `python -m toolchain build` in its own process group, killed with SIGKILL when the phase
is seen running (a `git fetch` child, a `git apply`, the build backend, the wheel in the work directory),
after a seeded random delay.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.spine_helpers import GitRepo, Workspace, component, recipe_data
from toolchain.core.fs import sha256_file

SEED = int(os.environ.get("TOOLCHAIN_FAULT_SEED", "14"))

DESCRIBE_BACKEND = '''"""tiny_backend with the version from `git describe` (like setuptools-scm)."""
import os
import subprocess

_here = os.path.dirname(os.path.abspath(__file__))
_tag, _n, _g = subprocess.check_output(["git", "describe", "--tags", "--long", "--match", "v*"], cwd=_here,
                                       text=True).strip().rsplit("-", 2)
os.environ["SETUPTOOLS_SCM_PRETEND_VERSION"] = _tag[1:] + ("" if _n == "0" else f".post{_n}+{_g}")
from tiny_backend import *  # noqa: E402,F401,F403
'''


def _describe_repo(path: Path, blob_bytes: int, payload_bytes: int = 0) -> GitRepo:
    """tiny, built by DESCRIBE_BACKEND, tagged v1.0.0 and two commits past it (describe: v1.0.0-2-g...)."""
    repo = GitRepo.create(path, "tiny", tag="v1.0.0")
    pyproject = (repo.path / "pyproject.toml").read_text().replace('"tiny_backend"', '"describe_backend"')
    rng = random.Random(SEED)
    files = {"pyproject.toml": pyproject, "describe_backend.py": DESCRIBE_BACKEND}
    if payload_bytes:  # ships in the wheel: a cache write of that size
        files["tiny/payload.py"] = f"DATA = {rng.randbytes(payload_bytes).hex()!r}\n"
    repo.commit("version from git describe", files)
    if blob_bytes:  # in the repository only: fetch and checkout of that size
        (repo.path / "data").mkdir()
        (repo.path / "data" / "blob.bin").write_bytes(rng.randbytes(blob_bytes))
    repo.commit("data")
    return repo


def _workspace(root: Path, repo: GitRepo, url: str = "") -> Workspace:
    """A workspace whose recipe builds `repo` (from `url` when given) with a local patch."""
    ws = Workspace(root)
    ws.patch("tiny/p.patch", repo.make_patch({"tiny/patched.py": "PATCHED = True\n"}))
    ws.recipe("r", recipe_data({"tiny": {**component(repo, patches=["tiny/p.patch"]), **({"url": url} if url else {})}}))
    return ws


def _descendants(pid: int) -> dict[int, str]:
    """The live processes started under `pid` (each child of the tool leads a process group of its own):
    pid -> command line."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        kids = [p for p, pp in parent.items() if pp == current]
        found += kids
        todo += kids
    out = {}
    for child in found:
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                out[child] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return out


def _running(*words: str) -> Callable[[subprocess.Popen, Path], bool]:
    return lambda proc, cache: any(all(w in c for w in words) for c in _descendants(proc.pid).values())


def _exists(pattern: str) -> Callable[[subprocess.Popen, Path], bool]:
    def seen(proc: subprocess.Popen, cache: Path) -> bool:
        try:
            return any(cache.glob(pattern))
        except OSError:  # a directory the glob was reading was removed under it (the build moved on)
            return False
    return seen


# phase: (seen when, longest random delay after it is seen, seconds)
PHASES: dict[str, tuple[Callable[[subprocess.Popen, Path], bool], float]] = {
    "fetch": (_running("git", "127.0.0.1"), 0.2),                   # git talking to the server: a clone or fetch
    "checkout": (_exists("trees/.tmp-*"), 0.08),                    # a tree being cloned and checked out
    "patch": (_exists("trees/.tmp-*/describe_backend.py"), 0.04),   # checked out: the series is applied next
    "build": (_running("pip", "wheel"), 0.8),                       # the build backend at work
    "cache write": (_exists("work/*/*.whl"), 0.06),                 # the wheel made: normalized and stored next
}


def _kill_at(ws: Workspace, cache: Path, phase: str, rng: random.Random, out: Path, flags: list[str]) -> str:
    """Start a build, SIGKILL its process group at a random moment of `phase`. Returns what happened."""
    seen, longest = PHASES[phase]
    proc = ws.cli.start("build", "--recipe", "r", "--out", out, "--cache-dir", cache, "--json", *flags)
    try:
        deadline = time.monotonic() + 120
        while not seen(proc, cache):
            if proc.poll() is not None:
                return "finished before the phase was seen"
            assert time.monotonic() < deadline, f"{phase} never seen"
            time.sleep(0.001)
        time.sleep(rng.uniform(0, longest))
    finally:
        under = _descendants(proc.pid)
        for pid in [proc.pid, *under]:  # everything at once, as a kill -9 of the machine's work would
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    return "killed" if proc.returncode == -signal.SIGKILL else f"exited {proc.returncode} first"


def _wheels(result) -> dict[str, str]:
    assert result.returncode == 0, str(result)
    comps = result.json()["components"]
    for c in comps:
        assert sha256_file(Path(c["path"])) == c["sha256"]
    return {c["wheel"]: c["sha256"] for c in comps}


def _assert_cache_sound(cache: Path) -> None:
    for meta in (cache / "wheels").rglob("entry.json"):
        data = json.loads(meta.read_text())
        assert sha256_file(meta.parent / data["wheel"]) == data["sha256"], meta


@pytest.mark.slow
def test_sigkill_at_random_moments_of_every_phase_then_the_next_build_is_a_clean_one(tmp_path):
    """The repository is fetched over HTTP from 127.0.0.1, as from a real remote (a folder on this machine is
    cloned by its path, too quickly to be caught at it)."""
    from tests.test_sources import _dumb_http, serve_bare

    repo = _describe_repo(tmp_path / "repos" / "tiny", blob_bytes=2 << 20, payload_bytes=512 << 10)
    with _dumb_http(tmp_path / "served") as port:
        serve_bare(repo, tmp_path / "served")
        _sigkill_every_phase(tmp_path, repo, f"http://127.0.0.1:{port}/{repo.path.name}.git")


def _sigkill_every_phase(tmp_path: Path, repo: GitRepo, url: str) -> None:
    ws = _workspace(tmp_path / "ws", repo, url)
    clean = _wheels(ws.build("r", "clean", cache=tmp_path / "clean-cache"))
    assert list(clean) == [f"tiny-1.0.0.post2+g{repo.head()[:12]}-py3-none-any.whl"]  # describe reached the build
    rng = random.Random(SEED)
    kills: dict[str, int] = {p: 0 for p in PHASES}
    outcomes = []
    for round_ in range(9):  # (until 20 kills, 4 of them in a fetch)
        cache = tmp_path / f"cache-{round_}"  # each round starts cold, so every phase is run (and killed)
        flags: list[str] = []
        for phase in PHASES:
            what = _kill_at(ws, cache, phase, rng, ws.root / "killed", flags)
            outcomes.append((round_, phase, what))
            kills[phase] += what == "killed"
            if what != "killed":  # it got through: make the next runs do every phase again
                flags = ["--no-cache", "--fresh-sources"]
            _assert_cache_sound(cache)
        after = ws.build("r", f"after-{round_}", cache=cache)
        assert _wheels(after) == clean, (outcomes, str(after))
        if sum(kills.values()) >= 20 and kills["fetch"] >= 4:
            break
    again = ws.cli("build", "--recipe", "r", "--out", ws.root / "settled", "--cache-dir", cache)
    assert again.returncode == 0 and again.stderr.count(": cached ") == 1, str(again)  # settled: a cache hit
    print(f"\nSIGKILLs by phase (seed {SEED}): {kills}; total {sum(kills.values())}; outcomes {outcomes}")
    assert sum(kills.values()) >= 20 and kills["fetch"] >= 4, outcomes


@pytest.mark.slow
def test_a_fetch_killed_midway_leaves_a_mirror_that_is_fetched_again_before_use(tmp_path):
    """The wedge of the issue: objects without refs made every later build fail `git describe`. A new mirror
    is cloned into a temporary directory renamed into place only when whole, so a kill while its objects
    arrive leaves no mirror under the final name (and never one with objects but no refs)."""
    repo = _describe_repo(tmp_path / "repos" / "tiny", blob_bytes=8 << 20)
    ws = _workspace(tmp_path / "ws", repo)
    clean = _wheels(ws.build("r", "clean", cache=tmp_path / "clean-cache"))
    proc = ws.cli.start("build", "--recipe", "r", "--out", ws.root / "killed", "--cache-dir", ws.cache, "--json")
    deadline = time.monotonic() + 60
    git_dir = ws.cache / "git"
    while not (list(git_dir.glob("*/objects/??/*")) or list(git_dir.glob("*/objects/pack/tmp_*"))):
        # loose objects (a small fetch) or a pack being written (a clone) arriving
        assert proc.poll() is None and time.monotonic() < deadline, "the fetch was not seen writing objects"
        time.sleep(0.002)
    for pid in [proc.pid, *_descendants(proc.pid)]:  # the tool and the git it runs, at once
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    for mirror in (ws.cache / "git").glob("*.git"):  # a mirror under its final name is a whole one
        refs = subprocess.run(["git", "--git-dir", str(mirror), "for-each-ref", "refs/heads", "refs/tags"],
                              capture_output=True, text=True).stdout
        assert refs != "", f"{mirror}: objects without refs, the state that used to wedge every build"
    assert _wheels(ws.build("r", "after")) == clean


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["refs deleted", "tags deleted", "objects deleted", "HEAD deleted",
                                    "a file where the mirror was"])
def test_fresh_sources_repairs_a_damaged_mirror(tmp_path, damage):
    repo = _describe_repo(tmp_path / "repos" / "tiny", blob_bytes=0)
    ws = _workspace(tmp_path / "ws", repo)
    clean = _wheels(ws.build("r", "clean"))
    (mirror,) = (ws.cache / "git").glob("*.git")
    git = ["git", "--git-dir", str(mirror)]
    if damage in ("refs deleted", "tags deleted"):
        pattern = "refs/tags" if damage == "tags deleted" else "refs/"
        refs = subprocess.run([*git, "for-each-ref", "--format=delete %(refname)", pattern], capture_output=True,
                              text=True, check=True).stdout
        subprocess.run([*git, "update-ref", "--stdin"], input=refs, text=True, check=True)
    elif damage == "objects deleted":
        subprocess.run(["rm", "-rf", str(mirror / "objects")], check=True)
        (mirror / "objects").mkdir()
    elif damage == "HEAD deleted":
        (mirror / "HEAD").unlink()
    else:
        subprocess.run(["rm", "-rf", str(mirror)], check=True)
        mirror.write_text("not a repository")
    r = ws.build("r", "repaired", "--fresh-sources", "--no-cache")
    assert _wheels(r) == clean, str(r)
    tags = subprocess.run([*git, "tag"], capture_output=True, text=True).stdout.split()
    assert tags == ["v1.0.0"]


# ---- a full disk under the cache ---------------------------------------------------------------------------

@pytest.fixture
def tiny_mount(tmp_path):
    """mount(dir): a 256 KiB tmpfs at `dir` (root only), unmounted at teardown."""
    mounted: list[Path] = []

    def mount(where: Path) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        where.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)  # the test may have unmounted it


@pytest.mark.parametrize("full", ["the whole cache (the fetch)", "the wheel cache (storing the wheel)"])
def test_a_full_disk_under_the_cache_is_a_clean_error_and_the_cache_still_builds_after(tmp_path, tiny_mount, full):
    repo = _describe_repo(tmp_path / "repos" / "tiny", blob_bytes=1 << 20 if "whole" in full else 0,
                          payload_bytes=0 if "whole" in full else 400 << 10)
    ws = _workspace(tmp_path / "ws", repo)
    cache = tmp_path / "cache"
    tiny_mount(cache if "whole" in full else cache / "wheels")
    r = ws.build("r", "out", cache=cache)
    assert r.returncode == 1, str(r)
    assert "Traceback" not in r.stderr, str(r)
    error = r.json()["error"]
    assert "No space left on device" in error and str(cache) in error, error
    assert "--cache-dir" in r.json()["hint"]
    assert not list((cache / "wheels").rglob("entry.json"))  # nothing half-stored
    if "whole" not in full:
        subprocess.run(["umount", "-l", str(cache / "wheels")], check=True)
        assert _wheels(ws.build("r", "out", cache=cache))  # with space again, the same cache builds
