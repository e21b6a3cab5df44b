"""A warm build runs the real checks (issue 32): each change a user makes between two warm builds of the demo,
with the tool installed from its wheel, gets the answer a full run gives in that state. (A warm build used to
be answered from a recorded run, which these changes fooled: a new torch or oneAPI, a wheel rewritten in
place, a read-only cache, a closed stdout, a planted or linked cache folder.)"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.spine_helpers import Result
from tests.test_cli_contract import mount_point  # noqa: F401  (the fixture: a read-only bind mount)

pytestmark = pytest.mark.slow

NOBODY = 65534


def build(user, out: Path, *extra: object) -> Result:
    return user("build", "--recipe", "mine", "--out", out, "--json", *extra)


def sources(r: Result) -> dict[str, str]:
    assert r.returncode == 0, str(r)
    return {c["name"]: c["source"] for c in r.json()["components"]}


def lock_of(out: Path) -> dict:
    return tomllib.loads((out / "stack.lock.toml").read_text())


def my_recipe(user, body: str = "") -> None:
    """~/work/recipes/mine.toml: the shipped demo, with the user's own settings."""
    recipe = user.cwd / "recipes" / "mine.toml"
    recipe.parent.mkdir(parents=True, exist_ok=True)
    recipe.write_text(f'extends = "demo"\n{body}')


def built_then_warm(user, out: Path) -> str:
    """A cold build, then a warm one served from the cache: the lock's text (a warm build writes the same)."""
    cold = build(user, out)
    assert set(sources(cold).values()) == {"built"}, str(cold)
    text = (out / "stack.lock.toml").read_text()
    warm = build(user, out)
    assert set(sources(warm).values()) == {"local-cache"}, str(warm)
    assert (out / "stack.lock.toml").read_text() == text
    return text


def rewrite_in_place(path: Path, old: bytes, new: bytes) -> None:
    """`old` → `new` (the same length) in the file itself: the same inode and size, its mtime put back: only
    its ctime (and its content) tell the change."""
    assert len(old) == len(new)
    st = path.stat()
    data = path.read_bytes()
    assert old in data
    with open(path, "r+b") as f:
        f.write(data.replace(old, new))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)


def install_torch(site: Path, version: str) -> None:
    """A `torch` distribution as pip leaves one (a stand-in: its metadata and its version.py, what the target's
    probe reads), replacing any other version."""
    for old in site.glob("torch-*.dist-info"):
        shutil.rmtree(old)
    shutil.rmtree(site / "torch", ignore_errors=True)
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (site / "torch" / "version.py").write_text(f"__version__ = '{version}'\nxpu = '20250301'\n")
    info = site / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (info / "RECORD").write_text("")


def target_venv(tmp_path: Path) -> tuple[Path, Path]:
    """~/target: a venv for the target interpreter (seeing the suite's packages), and its site-packages. The
    suite's packages are seen through a .pth naming the running interpreter's site folders (after the venv's
    own), not with --system-site-packages: that gives the BASE interpreter's, which may lack what a build needs
    (a python.org or pyenv build: setuptools without `wheel`) when the suite runs in a venv."""
    from tests.journeys.conftest import _sees_this_interpreter

    target = tmp_path / "home" / "target"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True, timeout=120)
    _sees_this_interpreter(target, dict(os.environ))
    python = target / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True, timeout=60).stdout.strip())
    return python, site


def test_a_new_torch_in_the_target_interpreter_is_probed_again_rebuilt_and_locked(user, tmp_path):
    python, site = target_venv(tmp_path)
    install_torch(site, "2.9.0")
    my_recipe(user, f'\n[target]\npython = "{python}"\n')
    out = tmp_path / "home" / "out"
    built_then_warm(user, out)
    assert lock_of(out)["target"]["torch-version"] == "2.9.0"

    install_torch(site, "2.10.0")  # `pip install torch==2.10.0` into the target
    r = build(user, out)
    assert sources(r) == {"engine": "built", "kernels": "built", "ark": "built"}, str(r)
    assert lock_of(out)["target"]["torch-version"] == "2.10.0"
    text = (out / "stack.lock.toml").read_text()
    again = build(user, out)
    assert set(sources(again).values()) == {"local-cache"}
    assert (out / "stack.lock.toml").read_text() == text


def test_a_new_oneapi_behind_the_same_setvars_is_sourced_again_rebuilt_and_locked(user, tmp_path):
    oneapi = tmp_path / "home" / "oneapi"
    shutil.copytree(user.installed.package / "demo_src" / "oneapi-standin", oneapi)
    my_recipe(user, f'\n[toolchain]\nsetvars = "{oneapi / "setvars.sh"}"\n')
    out = tmp_path / "home" / "out"
    built_then_warm(user, out)
    assert lock_of(out)["toolchain"]["oneapi-version"] == "2025.2.0"

    # the compiler updated in place: its banner says 2025.3.1; setvars, its folders and the file's size and
    # mtime are as they were
    rewrite_in_place(oneapi / "bin" / "icpx", b"2025.2.0", b"2025.3.1")
    r = build(user, out)
    assert sources(r) == {"engine": "built", "kernels": "built", "ark": "built"}, str(r)
    assert lock_of(out)["toolchain"]["oneapi-version"] == "2025.3.1"
    again = build(user, out)
    assert set(sources(again).values()) == {"local-cache"}


def test_an_out_wheel_rewritten_in_place_with_its_mtime_kept_is_replaced_from_the_cache(user, tmp_path):
    my_recipe(user)
    out = tmp_path / "home" / "out"
    text = built_then_warm(user, out)
    assert set(sources(build(user, out)).values()) == {"local-cache"}  # (its digest now remembered by stat)
    locked = {c["wheel"]["file"]: c["wheel"]["sha256"] for c in lock_of(out)["components"]}
    wheel = next(out / "wheels" / name for name in locked if name.startswith("demo_engine"))
    data = wheel.read_bytes()
    middle = len(data) // 2
    rewrite_in_place(wheel, data[middle:middle + 8], bytes(b ^ 0xFF for b in data[middle:middle + 8]))
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() != locked[wheel.name]

    r = build(user, out)
    assert set(sources(r).values()) == {"local-cache"}, str(r)
    assert str(wheel) in r.stderr and "does not hash as its cache entry records" in r.stderr, r.stderr
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == locked[wheel.name]  # repaired
    assert (out / "stack.lock.toml").read_text() == text


def test_a_read_only_cache_is_exit_2_cannot_write(user, tmp_path, mount_point):  # noqa: F811
    my_recipe(user)
    out = tmp_path / "home" / "out"
    built_then_warm(user, out)
    mount_point("ro", tmp_path / "home" / "cache")
    r = build(user, out)
    assert r.returncode == 2, str(r)
    assert "cannot write" in r.json()["error"] and "read-only file system" in r.json()["error"], str(r)
    human = user("build", "--recipe", "mine", "--out", out)
    assert human.returncode == 2 and "ERROR:" in human.stderr and "cannot write" in human.stderr, str(human)
    assert "Traceback" not in r.stderr + human.stderr


def test_a_warm_build_with_stdout_closed_exits_0_without_a_traceback(user, tmp_path):
    my_recipe(user)
    out = tmp_path / "home" / "out"
    text = built_then_warm(user, out)
    for extra in ((), ("--json",)):
        argv = [str(user.installed.toolchain), "build", "--recipe", "mine", "--out", str(out), *extra]
        r = subprocess.run(["bash", "-c", 'exec "$@" >&-', "bash", *argv], cwd=user.cwd, env=user.env,
                           stderr=subprocess.PIPE, text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (extra, r.stderr)
    assert (out / "stack.lock.toml").read_text() == text


def test_a_foreign_owned_or_linked_folder_in_the_cache_is_named_and_nothing_planted_is_used(user, tmp_path):
    home = tmp_path / "home"
    cache, out = home / "cache", home / "out"
    my_recipe(user)
    text = built_then_warm(user, out)

    # another user's memo folder, where that user planted a remembered oneAPI version
    memo = cache / "memo"
    (planted,) = memo.glob("setvars-*.json")
    saved = json.loads(planted.read_text())
    saved["value"]["info"]["oneapi_version"] = "6666.6"
    planted.write_text(json.dumps(saved))
    os.chown(planted, NOBODY, NOBODY)
    os.chown(memo, NOBODY, NOBODY)
    r = build(user, out)  # (a folder in the cache another user owns: none of the cache is used this run)
    assert set(sources(r).values()) == {"built"}, str(r)
    assert f"cache folder {cache}: memo is owned by uid {NOBODY}" in r.stderr, r.stderr
    assert "private, empty cache instead" in " ".join(r.stderr.split()), r.stderr
    assert "6666.6" not in r.stdout + r.stderr + (out / "stack.lock.toml").read_text()
    assert (out / "stack.lock.toml").read_text() == text
    assert planted.stat().st_uid == NOBODY  # nothing written there either
    os.chown(memo, os.geteuid(), os.getegid())

    # a FIFO planted where a remembered probe is kept: read without blocking, a miss, written again
    planted.unlink()
    os.mkfifo(planted)
    r = user("build", "--recipe", "mine", "--out", out, "--json", timeout=120)
    assert set(sources(r).values()) == {"local-cache"}, str(r)
    assert planted.is_file() and json.loads(planted.read_text())["value"]["info"]["oneapi_version"] == "2025.2.0"

    # the memo folder a link to a folder of the user's own files: used, named, nothing of it deleted
    elsewhere = home / "elsewhere"
    elsewhere.mkdir()
    shutil.move(memo, elsewhere / "memo")
    memo.symlink_to(elsewhere / "memo")
    (elsewhere / "memo" / "notes.json").write_text("{}\n")
    r = build(user, out)
    assert set(sources(r).values()) == {"local-cache"}, str(r)
    assert f"cache folder {cache}: memo is a symbolic link" in r.stderr, r.stderr
    assert (elsewhere / "memo" / "notes.json").read_text() == "{}\n"
    assert (out / "stack.lock.toml").read_text() == text

    # the wheel cache a link, one of its entries damaged: not evicted through the link, the build says why
    wheels = cache / "wheels"
    shutil.move(wheels, elsewhere / "wheels")
    wheels.symlink_to(elsewhere / "wheels")
    damaged = next(e for e in (elsewhere / "wheels").glob("*/*/entry.json") if "demo_engine" in e.read_text())
    damaged.write_text("garbage")
    r = build(user, out)
    assert r.returncode == 1, str(r)
    assert "symbolic link" in r.json()["error"] and "Traceback" not in r.stderr, str(r)
    assert f"{cache}: wheels is a symbolic link" in r.stderr or "wheels is a symbolic link" in r.stderr, r.stderr
    assert damaged.parent.is_dir() and damaged.read_text() == "garbage"  # nothing deleted out of the cache
