"""The tool's own fast paths (issue 15): git asked once per (mirror, commit), the build-requirement check
skipped where its answer is known, the recipe's TOML remembered, and a warm no-op that imports no TOML
writer, no packaging tags, no rich, no container runtime and runs no git at all.

Real git repositories, real builds through the CLI; the speed itself is measured by the benchmarks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spine_helpers import GitRepo, component, recipe_data
from toolchain.build import buildreqs
from toolchain.build.buildreqs import check_build_requires, declared_requires
from toolchain.core import toml as tomlio
from toolchain.core.git import git
from toolchain.core.proc.runner import run
from toolchain.errors import BuildError
from toolchain.lock import wheel_name_version
from toolchain.sources import mirrors as mirrors_mod
from toolchain.sources.mirrors import Mirrors, parse_commit
from toolchain.target.parts import Workspace

SHOW = "%H%x00%s%x00%cI%x00%ct%x00%an"


def git_show(repo: Path, sha: str) -> dict[str, str]:
    out = subprocess.run(["git", "-C", str(repo), "show", "-s", f"--format={SHOW}", sha], capture_output=True,
                         text=True, check=True).stdout.rstrip("\n").split("\x00")
    return dict(zip(("commit", "subject", "date", "epoch", "author"), out, strict=False))


def raw_commit(repo: Path, sha: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "cat-file", "commit", sha], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture(autouse=True)
def fresh_process_caches():
    """What the module-level caches hold is per process; each test starts as a new process would."""
    mirrors_mod._COMMITS.clear()
    mirrors_mod._DESCRIBE.clear()
    buildreqs._FOUND.clear()
    yield
    mirrors_mod._COMMITS.clear()
    mirrors_mod._DESCRIBE.clear()
    buildreqs._FOUND.clear()


# ---- commit facts from one cat-file --------------------------------------------------------------------

def test_commit_facts_read_from_the_object_match_git_show(tmp_path):
    repo = GitRepo.create(tmp_path / "r")
    shas = []
    for zone in ("+0000", "-0700", "+0530", "+1400"):
        when = f"1700000000 {zone}"
        subprocess.run(["git", "-C", str(repo.path), "-c", "user.name=Ann Author", "-c", "user.email=a@b.invalid",
                        "commit", "-q", "--allow-empty", "-m", "a subject\non two lines\n\nand a body"],
                       env={"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when, "PATH": "/usr/bin:/bin",
                            "HOME": str(tmp_path)}, check=True)
        shas.append(repo.head())
    # a signed commit: the gpgsig header's continuation lines belong to it, not to the fields
    text = raw_commit(repo.path, shas[-1]).replace(
        "\n\n", "\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n -----END PGP SIGNATURE-----\n\n", 1)
    signed = subprocess.run(["git", "-C", str(repo.path), "hash-object", "-t", "commit", "-w", "--stdin"],
                            input=text, capture_output=True, text=True, check=True).stdout.strip()
    for sha in [*shas, signed]:
        assert parse_commit(sha, raw_commit(repo.path, sha).rstrip("\n")) == git_show(repo.path, sha)


def test_git_is_asked_once_per_mirror_and_commit_and_the_answer_is_kept_on_disk(tmp_path, monkeypatch):
    repo = GitRepo.create(tmp_path / "r")
    first = repo.head()
    cache = tmp_path / "cache"
    m = Mirrors(cache)
    m.ensure(repo.url, first)
    calls: list[list[str]] = []
    real = git  # what mirrors calls (toolchain.core.git's)

    def counting(args, **kw):
        calls.append(list(args))
        return real(args, **kw)

    monkeypatch.setattr(mirrors_mod, "git", counting)
    info = m.commit_info(repo.url, first)
    assert info == git_show(repo.path, first)
    assert m.has_commit(repo.url, first)
    assert m.commit_info(repo.url, first) == info
    assert calls == []  # ensure() asked already; everything since came from that one answer

    mirrors_mod._COMMITS.clear()  # a new process: the answer is on disk
    assert Mirrors(cache).commit_info(repo.url, first) == info
    assert calls == []

    # a commit the mirror lacks is not remembered as missing: fetched later, it is found
    second = repo.commit("second")
    assert not m.has_commit(repo.url, second)
    m.ensure(repo.url, second)
    assert m.commit_info(repo.url, second) == git_show(repo.path, second)

    # the mirror removed and fetched anew: what was kept about it is not trusted
    shutil.rmtree(m.path(repo.url))
    mirrors_mod._COMMITS.clear()
    calls.clear()
    assert not m.has_commit(repo.url, first)
    m.ensure(repo.url, first)
    assert any(c[:2] == ["cat-file", "--batch"] for c in calls)
    with pytest.raises(Exception, match="not in the mirror"):
        m.commit_info(repo.url, "0" * 40)


def test_describe_is_kept_until_a_fetch_brings_tags(tmp_path):
    repo = GitRepo.create(tmp_path / "r", tag="v1.0.0")
    head = repo.commit("after the tag")
    m = Mirrors(tmp_path / "cache")
    m.ensure(repo.url, head)
    assert m.describe(repo.url, head).startswith("v1.0.0-1-g")
    repo.git("tag", "v1.1.0", head)
    assert m.describe(repo.url, head).startswith("v1.0.0-1-g")  # not fetched: the mirror has no v1.1.0
    m.ensure(repo.url, None)  # a fetch
    assert m.describe(repo.url, head).startswith("v1.1.0-0-g")


# ---- build requirements --------------------------------------------------------------------------------

def test_declared_requires(tmp_path):
    assert declared_requires(tmp_path) == []  # no pyproject: nothing declared
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert declared_requires(tmp_path) == []
    (tmp_path / "pyproject.toml").write_text("[build-system]\nrequires = ['setuptools>=61', 'wheel']\n")
    assert declared_requires(tmp_path) == ["setuptools>=61", "wheel"]
    (tmp_path / "pyproject.toml").write_text("[build-system\nrequires = [")
    assert declared_requires(tmp_path) is None  # unreadable here: the target reads it


def _recording_workspace(src: Path, seen: list[list[str]]) -> Workspace:
    def runner(argv, *, env, cwd, log, verbose=False, capture=False):
        seen.append(list(argv))
        return run(argv, env=None, cwd=cwd, log=log, capture=capture)
    return Workspace(str(src), str(src), {}, runner)


def test_the_requirement_check_runs_once_per_target_and_only_when_something_is_declared(tmp_path):
    seen: list[list[str]] = []
    ws = _recording_workspace(tmp_path, seen)
    identity = {"python": sys.executable}
    check_build_requires(ws, sys.executable, str(tmp_path), "x", None, tree=tmp_path, identity=identity)
    assert seen == []  # nothing declared: no interpreter started

    (tmp_path / "pyproject.toml").write_text("[build-system]\nrequires = ['setuptools']\n")
    for _ in range(3):
        check_build_requires(ws, sys.executable, str(tmp_path), "x", None, tree=tmp_path, identity=identity)
    assert len(seen) == 1  # found installed once: known for the rest of the process
    check_build_requires(ws, sys.executable, str(tmp_path), "x", None, tree=tmp_path, identity=None)
    assert len(seen) == 2  # no identity for the interpreter: always checked

    (tmp_path / "pyproject.toml").write_text("[build-system]\nrequires = ['setuptools', 'tiny-not-installed-x']\n")
    for _ in range(2):  # a missing requirement is never remembered
        with pytest.raises(BuildError, match="tiny-not-installed-x"):
            check_build_requires(ws, sys.executable, str(tmp_path), "x", None, tree=tmp_path, identity=identity)
    assert len(seen) == 4


# ---- TOML text and wheel names -------------------------------------------------------------------------

def test_toml_text_is_remembered_per_exact_data(tmp_path, monkeypatch):
    data = {"a": 1, "b": {"c": [1.0, "x"], "d": True}}
    text = tomlio.dumps(data)
    assert tomlio.dumps_remembered(data, tmp_path) == text
    monkeypatch.setattr(tomlio, "dumps", lambda d: pytest.fail("the TOML writer ran again"))
    assert tomlio.dumps_remembered({"a": 1, "b": {"c": [1.0, "x"], "d": True}}, tmp_path) == text
    monkeypatch.undo()
    other = {"a": 1.0, "b": {"c": [1.0, "x"], "d": True}}  # equal in Python, not in TOML
    assert tomlio.dumps_remembered(other, tmp_path) == tomlio.dumps(other) != text
    one, two = {"z": 1, "a": 2}, {"a": 2, "z": 1}  # key order is kept in the text
    assert tomlio.dumps_remembered(one, tmp_path) == tomlio.dumps(one)
    assert tomlio.dumps_remembered(two, tmp_path) == tomlio.dumps(two) != tomlio.dumps(one)


def test_toml_parses_are_remembered_per_text_when_the_block_ends_and_never_a_secret(tmp_path, monkeypatch):
    memo = tmp_path / "memo"
    text = 'z = 1\n[a]\nb = [1.5, "x"]\n[a.c]\nd = true\n'
    with tomlio.parses_remembered(memo):
        assert tomlio.loads(text) == {"z": 1, "a": {"b": [1.5, "x"], "c": {"d": True}}}
        assert not memo.exists()  # (remembered when the block ends: a bad recipe leaves no cache behind)
    def failed_build() -> None:
        with tomlio.parses_remembered(tmp_path / "failed"):
            tomlio.loads(text)
            raise RuntimeError("the build failed")

    with pytest.raises(RuntimeError):
        failed_build()
    assert not (tmp_path / "failed").exists()
    (saved,) = memo.glob("toml-parsed-*.json")
    monkeypatch.setattr(tomlio, "_parse", lambda t: pytest.fail("parsed again"))
    with tomlio.parses_remembered(memo):
        got = tomlio.loads(text)
    assert got == {"z": 1, "a": {"b": [1.5, "x"], "c": {"d": True}}} and list(got) == ["z", "a"]  # (key order)
    monkeypatch.undo()
    saved.write_text(saved.read_text().replace("1.5", "2.5"))  # an edited memo is a miss: parsed again
    with tomlio.parses_remembered(memo):
        assert tomlio.loads(text)["a"]["b"] == [1.5, "x"]
    for kept_out in ('url = "https://user:hunter22@example.org/x"\n', '[env]\nHF_TOKEN = "hf_abcdefgh"\n',
                     "when = 2024-01-02T03:04:05Z\n", "x = inf\n"):
        with tomlio.parses_remembered(tmp_path / "other"):
            assert tomlio.loads(kept_out) == tomlio._parse(kept_out)
        assert not (tmp_path / "other").exists(), kept_out  # a secret, a date, a non-finite float: not kept


def test_a_wheels_metadata_is_remembered_while_its_stat_stays(tmp_path, monkeypatch):
    import os
    import zipfile

    from toolchain.build import wheelmeta

    wheel = tmp_path / "w-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("w-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: w\nVersion: 1.0\n"
                   "Requires-Dist: a>=1\nRequires-Dist: b\n\nthe description\n")
    first = wheelmeta.remembered_wheel_meta(wheel, tmp_path / "memo")
    assert first == wheelmeta.wheel_meta(wheel) and first.requires_dist == ("a>=1", "b")
    monkeypatch.setattr(wheelmeta, "wheel_meta", lambda w: pytest.fail("the wheel was opened again"))
    assert wheelmeta.remembered_wheel_meta(wheel, tmp_path / "memo") == first
    monkeypatch.undo()
    st = wheel.stat()
    with zipfile.ZipFile(wheel, "w") as z:  # rewritten, its mtime set back: its ctime tells
        z.writestr("w-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: w\nVersion: 1.0\n\n")
    os.utime(wheel, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert wheelmeta.remembered_wheel_meta(wheel, tmp_path / "memo").requires_dist == ()


@pytest.mark.parametrize("name", [
    "demo_engine-0.2.0-py3-none-any.whl", "Demo.Kernels-1.0.0+xpu-cp311-cp311-linux_x86_64.whl",
    "vllm-0.11.1.dev12+g0abc123.d20260101-py3-none-any.whl", "pkg-1.0_rc1-1-py3-none-any.whl",
    "auto_round_lib-0.9.1.post2-cp311-cp311-linux_x86_64.whl", "x-01.002-py3-none-any.whl",
])
def test_wheel_name_version_agrees_with_packaging(name):
    from packaging.utils import canonicalize_name, parse_wheel_filename

    n, v, _, _ = parse_wheel_filename(name)
    assert wheel_name_version(name) == (str(canonicalize_name(n)), str(v))


def test_a_normalized_version_is_its_own_normalization_and_imports_no_packaging():
    """The versions taken as already normalized are exactly those packaging writes back unchanged (checked
    over combinations of every part, normalized or not); for those the version parser is never imported."""
    from packaging.version import InvalidVersion, Version

    from toolchain.lock import _NORMALIZED_VERSION

    taken = 0
    for release in ("0", "1", "01", "1.0", "1.02", "10.0.0", "2026.1.0.20260617"):
        for pre in ("", "a1", "b0", "rc2", "c1", "alpha1", "-rc1", "a01", ".a1"):
            for post in ("", ".post2", ".post02", "post1", "-1", ".rev3"):
                for dev in ("", ".dev12", ".dev", "dev3"):
                    for local in ("", "+xpu", "+g0abc123.d20260101", "+01", "+0", "+0a", "+X", "+a_b", "+a.1"):
                        v = release + pre + post + dev + local
                        try:
                            normalized = str(Version(v))
                        except InvalidVersion:
                            normalized = None
                        if _NORMALIZED_VERSION.fullmatch(v):
                            taken += 1
                            assert normalized == v, v
                        elif normalized is not None and "-" not in v:  # (a wheel name has no "-" in it)
                            assert wheel_name_version(f"x-{v}-py3-none-any.whl")[1] == normalized
    assert taken > 400
    code = ("import sys; from toolchain.lock import wheel_name_version as w; "
            "print(w('demo_kernels-0.1.0.post2+gcbeb92f56039-cp311-cp311-linux_x86_64.whl'), "
            "'packaging.version' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.stdout.split() == ["('demo-kernels',", "'0.1.0.post2+gcbeb92f56039')", "False"], r.stderr


@pytest.mark.parametrize("bad", ["x-1.0.tar.gz", "x-notaversion-py3-none-any.whl", "x-1.0-py3.whl"])
def test_wheel_name_version_refuses_what_is_not_a_wheel_name(bad):
    with pytest.raises(ValueError, match="."):
        wheel_name_version(bad)


# ---- the warm no-op ------------------------------------------------------------------------------------

NOT_ON_THE_WARM_PATH = ("tomlkit", "tomli_w", "packaging.utils", "packaging.tags", "packaging.requirements", "rich",
                        "jsonschema", "requests", "cyclonedx", "uv", "importlib.metadata", "toolchain.target.container",
                        "toolchain.release.", "toolchain.resolve.uvpin", "toolchain.smoke", "uuid", "difflib",
                        "toolchain.sharing.auth", "elftools",  # (hostfacts: the box is read again, issue 39)
                        "concurrent.futures", "logging",  # (thread pools: only where components compile at once)
                        "urllib.request", "http.client", "ssl", "html.parser",  # (downloads: only a prebuilt's)
                        "dataclasses", "inspect", "tomllib", "zipfile", "datetime",  # (core/record; the parses
                        "hashlib")  # and wheel metadata remembered; short texts hashed by core/fs without OpenSSL)
NOT_IMPORTED_WITHOUT_A_REMOTE = {"toolchain.build.remotecache", "toolchain.sharing.registry", "toolchain.sharing.transport"}  # the client (sharing/settings.py decides without it)

# The CLI under an audit hook that writes every process start (any way Python has of starting one) to a file.
AUDITED = """
import runpy, sys
started = open(sys.argv.pop(1), "w")
def hook(event, args):
    if event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.fork", "os.forkpty", "os.system"):
        started.write(f"{event} {args!r}\\n")
        started.flush()
sys.addaudithook(hook)
runpy.run_module("toolchain", run_name="__main__", alter_sys=True)
"""


def test_a_warm_no_op_starts_no_process_imports_no_writer_and_rewrites_nothing(ws, make_repo, tmp_path):
    repo = make_repo("tiny", "tiny")
    ws.recipe("r", recipe_data({"tiny": component(repo)}))
    assert ws.build("r").returncode == 0
    out = ws.root / "out"
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(out.iterdir()) if p.is_file()}
    started = tmp_path / "started"
    argv = [sys.executable, "-X", "importtime", "-c", AUDITED, str(started), "build", "--recipe", "r", "--out",
            str(out), "--cache-dir", str(ws.cache), "--json"]
    done = subprocess.run(argv, cwd=ws.root, env=ws.env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "toolchain.pipeline" in imported  # the measurement saw the build
    assert sorted(m for m in imported if m.startswith(NOT_ON_THE_WARM_PATH)) == []
    assert imported & NOT_IMPORTED_WITHOUT_A_REMOTE == set()
    assert started.read_text() == ""  # no git, no probe, no resolver: no process at all
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(out.iterdir()) if p.is_file()} == before

    # the same run after a change that needs the target (a new commit to build) does start processes: the
    # hook sees them
    repo.commit("tiny: another change", {"tiny/extra.py": "X = 1\n"})
    ws.recipe("r", recipe_data({"tiny": component(repo)}))
    done = subprocess.run(argv, cwd=ws.root, env=ws.env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'git'" in started.read_text()


def test_a_warm_build_writes_again_a_lock_or_record_that_is_not_what_it_writes(ws, make_repo):
    """A warm no-op keeps the lock when its bytes and its record's are what this build writes (compared by
    digest: nothing parsed); otherwise the lock an earlier build left is read back, and what is not the build's
    is written again: a lock with a comment added (the record beside it is then another lock's), a record
    naming another recipe file. Each time the files end as the build writes them."""
    repo = make_repo("tiny", "tiny")
    ws.recipe("r", recipe_data({"tiny": component(repo)}))
    assert ws.build("r").returncode == 0
    assert ws.build("r").returncode == 0  # (the first warm build records the cache hit's measures)
    out = ws.root / "out"
    lock, record = out / "stack.lock.toml", out / "build-record.toml"
    written = {p: p.read_bytes() for p in (lock, record)}
    lock.write_bytes(written[lock] + b"# a note\n")
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    assert {p: p.read_bytes() for p in (lock, record)} == written
    recipe_file = str(ws.recipes / "r.toml")
    assert recipe_file.encode() in written[record]
    record.write_bytes(written[record].replace(recipe_file.encode(), b"/elsewhere/recipes/r.toml"))
    r = ws.build("r")
    assert r.returncode == 0, str(r)
    assert {p: p.read_bytes() for p in (lock, record)} == written
    stamps = {p: p.stat().st_mtime_ns for p in (lock, record)}
    r = ws.build("r")  # and then a no-op again: nothing written
    assert r.returncode == 0 and "warning:" not in r.stderr, str(r)
    assert {p: p.stat().st_mtime_ns for p in (lock, record)} == stamps


def test_a_pyenv_shims_probe_is_remembered_until_what_chooses_its_interpreter_changes(tmp_path, monkeypatch):
    """A recipe's `python3` found as a pyenv shim (a script: a plain wrapper script is probed every time): the
    probe is remembered while the PYENV_* variables and PATH are the same and no .python-version (from PYENV_DIR
    up), global version file or installed version changes."""
    from toolchain.build.plan import probe_target
    from toolchain.recipe.model import TargetSpec
    from toolchain.target.host import HostRuntime

    root, here = tmp_path / "pyenv", tmp_path / "project"
    (root / "shims").mkdir(parents=True)
    (root / "versions").mkdir()
    here.mkdir()
    shim = root / "shims" / "python3"
    shim.write_text(f'#!/usr/bin/env bash\nset -e\nexport PYENV_ROOT="{root}"\nexec {sys.executable} "$@"\n'
                    f'# (a real shim: exec "$PYENV_ROOT/libexec/pyenv" exec "$program" "$@")\n')
    shim.chmod(0o755)
    other = tmp_path / "wrapper" / "python3"
    other.parent.mkdir()
    other.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    other.chmod(0o755)
    assert HostRuntime(TargetSpec(python=str(other))).identity() is None

    monkeypatch.setenv("PYENV_DIR", str(here))
    monkeypatch.delenv("PYENV_VERSION", raising=False)
    probes = []

    class Counting(HostRuntime):
        def probe_inputs(self):
            probes.append(1)
            return super().probe_inputs()

    def probe() -> object:
        runtime = Counting(TargetSpec(python=str(shim)))
        return probe_target(runtime, tmp_path / "memo", runtime.identity())

    first = probe()
    assert probe() == first and len(probes) == 1  # remembered
    (here / ".python-version").write_text("3.11\n")  # `pyenv local`
    probe()
    assert len(probes) == 2
    (root / "version").write_text("3.11\n")  # `pyenv global`
    probe()
    (root / "versions" / "3.12.1").mkdir()  # `pyenv install`
    probe()
    monkeypatch.setenv("PYENV_VERSION", "3.12.1")  # `pyenv shell`
    probe()
    assert len(probes) == 5
    probe()
    assert len(probes) == 5
