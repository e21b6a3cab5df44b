"""Issue 47, end to end with the installed tool: the issue's own cases of memos renamed or edited in the cache.
Two recipes (the demo, and the demo with a oneAPI stand-in that says 2099.1.0) are built warm into one cache;
then uid 65534 (a real other user: the suite runs as root) swaps their `memo/setvars-*.json` in a cache others
can write, or the owner edits one (2025.2.0 → 2099.9.9): the next warm build locks what a cold one does."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.journeys.test_probe_inputs import warm_answers_as_cold
from tests.journeys.test_warm_checks import NOBODY, build, my_recipe, rewrite_in_place

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")]

AS_NOBODY = ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]


def oneapi_of(out: Path) -> str:
    return tomllib.loads((out / "stack.lock.toml").read_text())["toolchain"]["oneapi-version"]


def two_recipes(user, tmp_path: Path) -> tuple[Path, Path, Path]:
    """~/work/recipes/mine.toml (the demo) and other.toml (a stand-in oneAPI 2099.1.0), each built cold then warm
    into its own out folder: the cache, and the two setvars memos (mine's, other's)."""
    other = tmp_path / "home" / "oneapi-2099"
    shutil.copytree(user.installed.package / "demo_src" / "oneapi-standin", other)
    rewrite_in_place(other / "bin" / "icpx", b"2025.2.0", b"2099.1.0")
    rewrite_in_place(other / "compiler" / "env" / "vars.sh", b"2025.2.0", b"2099.1.0")
    my_recipe(user)
    (user.cwd / "recipes" / "other.toml").write_text(f'extends = "demo"\n\n[toolchain]\nsetvars = "{other / "setvars.sh"}"\n')
    cache = Path(user.env["TOOLCHAIN_CACHE_DIR"])
    memos: dict[str, Path] = {}
    for name in ("mine", "other"):
        out = tmp_path / "home" / f"out-{name}"
        before = set((cache / "memo").glob("setvars-*.json")) if (cache / "memo").is_dir() else set()
        for _ in range(2):
            r = user("build", "--recipe", name, "--out", out, "--json", timeout=600)
            assert r.returncode == 0, str(r)
        (memos[name],) = set((cache / "memo").glob("setvars-*.json")) - before
    assert oneapi_of(tmp_path / "home" / "out-mine") == "2025.2.0"
    assert oneapi_of(tmp_path / "home" / "out-other") == "2099.1.0"
    return cache, memos["mine"], memos["other"]


def test_setvars_memos_another_uid_swapped_in_a_cache_others_can_write_are_not_served(user, tmp_path):
    cache, mine, other = two_recipes(user, tmp_path)
    for folder in (cache, *(p for p in cache.rglob("*") if p.is_dir() and not p.is_symlink())):
        os.chmod(folder, folder.stat().st_mode | 0o002)  # the folders others can write; the files stay 644
    for p in (tmp_path, *tmp_path.parents):  # (the way to the cache searchable by uid 65534)
        os.chmod(p, p.stat().st_mode | 0o001)
    swap = mine.with_name("swap.tmp")
    for src, dst in ((mine, swap), (other, mine), (swap, other)):
        subprocess.run([*AS_NOBODY, "mv", str(src), str(dst)], check=True, timeout=60)
    assert "2099.1.0" in mine.read_text() and mine.stat().st_uid == os.geteuid()  # still this user's,
    assert mine.stat().st_mode & 0o777 == 0o644                                       # mode 644
    out = tmp_path / "home" / "out-mine"
    warm, _ = warm_answers_as_cold(user, tmp_path, out)
    assert warm.returncode == 0, str(warm)
    assert oneapi_of(out) == "2025.2.0"
    assert f"cache folder {cache}: it is writable by other users" in warm.stderr, warm.stderr


def test_a_setvars_memo_its_owner_edited_or_renamed_is_not_served(user, tmp_path):
    _, mine, other = two_recipes(user, tmp_path)
    mine.write_text(mine.read_text().replace("2025.2.0", "2099.9.9"))  # an edit in a cache of this user's alone
    out = tmp_path / "home" / "out-mine"
    warm, _ = warm_answers_as_cold(user, tmp_path, out)
    assert warm.returncode == 0 and "cache folder" not in warm.stderr, str(warm)
    assert oneapi_of(out) == "2025.2.0" and "2099.9.9" not in (out / "stack.lock.toml").read_text()

    shutil.copyfile(other, mine)  # the other recipe's memo under this one's name
    r = build(user, out)
    assert r.returncode == 0, str(r)
    assert oneapi_of(out) == "2025.2.0"
