"""Each remembered probe records its own inputs (issue 39): a change to any file or variable a probe consulted
makes a warm build answer exactly as a cold one (a new cache and a new --out) does in the same state: the
same exit code, the same lock (modulo timings) and the same wheels."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.journeys.test_warm_checks import (
    build,
    built_then_warm,
    install_torch,
    my_recipe,
    rewrite_in_place,
    target_venv,
)
from tests.spine_helpers import Result

pytestmark = pytest.mark.slow

TIMINGS = ("build-seconds", "metrics", "compiler-cache", "resolved-at")  # (older locks held them; the build record now)


def _without_timings(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def lock_state(out: Path) -> object:
    """The lock in `out` modulo timings (None: no lock)."""
    path = out / "stack.lock.toml"
    return _without_timings(tomllib.loads(path.read_text())) if path.is_file() else None


def differences(a: object, b: object, at: str = "") -> list[str]:
    """Where two lock documents differ (dotted keys), for a readable failure."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted({*a, *b}) for d in differences(a.get(k), b.get(k), f"{at}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{at}[{i}]")]
    return [] if a == b else [f"{at}: {a!r} != {b!r}"[:300]]


def wheels(out: Path) -> dict[str, str]:
    """{file: sha256} of the wheels in `out`."""
    return {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in sorted((out / "wheels").glob("*.whl"))}


def cold_user(user, tmp_path: Path):
    """The same user, recipe folder and environment, with a new cache (and compiler cache)."""
    other = user.at(user.cwd)
    home = tmp_path / "cold-home"
    other.env = {**user.env, "TOOLCHAIN_CACHE_DIR": str(home / "cache"), "XDG_CACHE_HOME": str(home / "xdg-cache")}
    return other


def warm_answers_as_cold(user, tmp_path: Path, out: Path) -> tuple[Result, Result]:
    """A warm build into `out`, then a cold one (new cache, new --out) in the same state: they must agree."""
    warm = build(user, out)
    cold_out = tmp_path / "cold-out"
    cold = build(cold_user(user, tmp_path), cold_out)
    assert warm.returncode == cold.returncode, f"warm:\n{warm}\ncold:\n{cold}"
    if cold.returncode == 0:
        assert not differences(lock_state(out), lock_state(cold_out)), differences(lock_state(out), lock_state(cold_out))
        assert wheels(out) == wheels(cold_out)
    return warm, cold


def standin(user, tmp_path: Path) -> Path:
    """A copy of the demo's oneAPI stand-in the recipe sources (its torch site included)."""
    oneapi = tmp_path / "home" / "oneapi"
    shutil.copytree(user.installed.package / "demo_src" / "oneapi-standin", oneapi)
    my_recipe(user, f'\n[toolchain]\nsetvars = "{oneapi / "setvars.sh"}"\n')
    return oneapi


def test_the_built_against_package_renamed_in_the_torch_site_is_an_abi_mismatch_warm_as_cold(user, tmp_path):
    oneapi = standin(user, tmp_path)
    out = tmp_path / "home" / "out"
    built_then_warm(user, out)
    site = oneapi / "torch-site"
    (info,) = site.glob("standin_torch-*.dist-info")
    renamed = info.rename(site / "standin_torch-2.15.0+xpu.dist-info")
    metadata = renamed / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 2.14.0+xpu", "Version: 2.15.0+xpu"))
    warm, _ = warm_answers_as_cold(user, tmp_path, out)
    assert warm.returncode == 1 and "ABI" in warm.json()["error"], str(warm)
    assert "2.15.0" in warm.json()["error"], str(warm)


def test_a_develop_install_of_torch_whose_version_is_edited_is_seen_warm_as_cold(user, tmp_path):
    python, site = target_venv(tmp_path)
    source = tmp_path / "home" / "torch-src"
    source.mkdir()
    install_torch(source, "2.9.0")  # then made a develop install: its metadata as egg-info in the source folder
    (info,) = source.glob("torch-*.dist-info")
    shutil.rmtree(info)
    (source / "torch.egg-info").mkdir()
    pkg_info = source / "torch.egg-info" / "PKG-INFO"
    pkg_info.write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.9.0\n")
    (site / "__editable__.torch-2.9.0.pth").write_text(f"{source}\n")
    my_recipe(user, f'\n[target]\npython = "{python}"\n')
    out = tmp_path / "home" / "out"
    built_then_warm(user, out)
    assert tomllib.loads((out / "stack.lock.toml").read_text())["target"]["torch-version"] == "2.9.0"

    rewrite_in_place(pkg_info, b"2.9.0", b"2.9.1")  # the version edited in the source folder, mtime kept
    warm, _ = warm_answers_as_cold(user, tmp_path, out)
    assert {c["source"] for c in warm.json()["components"]} == {"built"}, str(warm)
    assert tomllib.loads((out / "stack.lock.toml").read_text())["target"]["torch-version"] == "2.9.1"


def test_torch_reached_through_pythonpath_is_locked_with_its_version_warm_as_cold(user, tmp_path):
    my_recipe(user)
    out = tmp_path / "home" / "out"
    built_then_warm(user, out)
    site = tmp_path / "home" / "torch-path"
    site.mkdir()
    install_torch(site, "2.11.0")
    user.env["PYTHONPATH"] = str(site)
    warm, _ = warm_answers_as_cold(user, tmp_path, out)
    assert {c["source"] for c in warm.json()["components"]} == {"built"}, str(warm)
    assert tomllib.loads((out / "stack.lock.toml").read_text())["target"]["torch-version"] == "2.11.0"
    again = build(user, out)
    assert {c["source"] for c in again.json()["components"]} == {"local-cache"}, str(again)

    rewrite_in_place(site / "torch-2.11.0.dist-info" / "METADATA", b"2.11.0", b"2.11.1")
    warm, _ = warm_answers_as_cold(user, tmp_path, out)
    assert tomllib.loads((out / "stack.lock.toml").read_text())["target"]["torch-version"] == "2.11.1"


def test_a_file_setvars_sources_rewritten_is_sourced_again_warm_as_cold(user, tmp_path):
    oneapi = standin(user, tmp_path)
    out = tmp_path / "home" / "out"
    built_then_warm(user, out)
    before = tomllib.loads((out / "stack.lock.toml").read_text())["toolchain"]["env-diff-sha256"]
    sourced = oneapi / "compiler" / "env" / "vars.sh"  # what the stand-in sources (as oneAPI does per component)
    text = sourced.read_bytes()
    assert b"2025.2.0" in text
    rewrite_in_place(sourced, b"2025.2.0", b"2025.2.9")
    warm, _ = warm_answers_as_cold(user, tmp_path, out)
    assert {c["source"] for c in warm.json()["components"]} == {"built"}, str(warm)
    assert tomllib.loads((out / "stack.lock.toml").read_text())["toolchain"]["env-diff-sha256"] != before


@pytest.mark.parametrize("edit", ["host", "native", "dependency", "comment"])
def test_the_out_lock_edited_with_its_mtime_restored_is_written_again_warm_as_cold(user, tmp_path, edit):
    my_recipe(user)
    out = tmp_path / "home" / "out"
    text = built_then_warm(user, out)
    path = out / "stack.lock.toml"
    st = path.stat()
    if edit == "host":
        # (the box's facts are the build record's now: the lock's [target] is what a build probed of it)
        edited = text.replace("[target]\n", '[target]\nkernel-note = "planted"\n', 1)
    elif edit == "native":
        edited = text.replace("[[native]]\n", '[[native]]\n', 1).replace('role = "built"', 'role = "prebuilt"', 1)
    elif edit == "dependency":  # the closure pins another file (a warm build used to take the out lock's closure)
        head, _, deps = text.partition("[[dependencies]]\n")
        deps = deps.replace('url = "{demo}/', 'url = "https://evil.example/', 1)  # (the demo's, portable)
        edited = f"{head}[[dependencies]]\n{deps}"
    else:
        edited = "# planted\n" + text
    assert edited != text
    path.write_text(edited)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    warm, _ = warm_answers_as_cold(user, tmp_path, out)
    assert {c["source"] for c in warm.json()["components"]} == {"local-cache"}, str(warm)
    assert path.read_text() == text
    assert "evil.example" not in warm.stdout + warm.stderr


def test_a_build_requirement_gone_from_the_target_fails_warm_as_cold(user, tmp_path):
    import importlib.util

    specs = [importlib.util.find_spec(n) for n in ("pip", "setuptools", "wheel")]  # (found, not imported)
    packages = [Path(str(spec.origin)).parent for spec in specs if spec is not None]
    assert len(packages) == 3

    target = tmp_path / "home" / "target"  # a venv that sees only the build requirements (folder `tools`, a .pth)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True, timeout=120)
    (site,) = (target / "lib").glob("python*/site-packages")
    tools = tmp_path / "home" / "tools"
    for where in packages:
        shutil.copytree(where, tools / where.name)
        (info,) = where.parent.glob(f"{where.name}-*.dist-info")
        shutil.copytree(info, tools / info.name)
    for extra in ("_distutils_hack", "distutils-precedence.pth"):  # (setuptools' own distutils)
        found = packages[1].parent / extra
        (shutil.copytree if found.is_dir() else shutil.copy)(found, tools / extra)
    (site / "tools.pth").write_text(f"import site; site.addsitedir({str(tools)!r})\n")
    my_recipe(user, f'\n[target]\npython = "{target / "bin" / "python"}"\n')
    out = tmp_path / "home" / "out"
    built_then_warm(user, out)

    (info,) = tools.glob("setuptools-*.dist-info")
    info.rename(tools / "setuptools-gone")  # `pip uninstall setuptools` left its package behind
    warm, _ = warm_answers_as_cold(user, tmp_path, out)
    assert warm.returncode == 1 and "build requirements missing" in warm.json()["error"], str(warm)
