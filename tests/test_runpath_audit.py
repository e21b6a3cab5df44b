"""A RUNPATH into the build interpreter's prefix: the build leaves the interpreter's own LDSHARED rpath out
(pyenv's adds `-Wl,-rpath,<its prefix>/lib`; build/intarget.py `link_env`), so a host build's shared objects and
lock carry none; an LDSHARED the recipe sets is used as set, and the native audit names the RUNPATH it gives."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import tomlkit

from tests.spine_helpers import REPO_ROOT, STANDIN_SETVARS, Cli, isolated_env
from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixture)
from tests.support.debian_image import containers_env
from toolchain.build.intarget import interpreter_prefixes, link_env, without_rpath
from toolchain.resolve.native import WheelAudit, read_elf
from toolchain.resolve.verdicts import build_machine_paths

# Real LDSHARED values (sysconfig.get_config_var("LDSHARED")), copied as data: (source, value, prefix, expected).
REAL = [
    ("pyenv 3.11.7 (python-build, --enable-shared), this machine",
     "gcc -shared -L/root/.pyenv/versions/3.11.7/lib -Wl,-rpath,/root/.pyenv/versions/3.11.7/lib "
     "-L/root/.pyenv/versions/3.11.7/lib -Wl,-rpath,/root/.pyenv/versions/3.11.7/lib",
     "/root/.pyenv/versions/3.11.7",
     "gcc -shared -L/root/.pyenv/versions/3.11.7/lib -L/root/.pyenv/versions/3.11.7/lib"),
    ("pyenv 3.6.15, this machine (the same form since 3.6)",
     "gcc -shared -L/root/.pyenv/versions/3.6.15/lib -Wl,-rpath,/root/.pyenv/versions/3.6.15/lib "
     "-L/root/.pyenv/versions/3.6.15/lib -Wl,-rpath,/root/.pyenv/versions/3.6.15/lib",
     "/root/.pyenv/versions/3.6.15",
     "gcc -shared -L/root/.pyenv/versions/3.6.15/lib -L/root/.pyenv/versions/3.6.15/lib"),
    ("conda (x86_64-conda-linux-gnu-gcc -pthread -shared, then the conda toolchain's LDFLAGS as a public "
     "Makefile copies them from conda's sysconfig)",
     "x86_64-conda-linux-gnu-gcc -pthread -shared -Wl,-O2 -Wl,--sort-common -Wl,--as-needed -Wl,-z,relro "
     "-Wl,-z,now -Wl,--disable-new-dtags -Wl,--gc-sections -Wl,-rpath,/opt/conda/lib "
     "-Wl,-rpath-link,/opt/conda/lib -L/opt/conda/lib",
     "/opt/conda",
     "x86_64-conda-linux-gnu-gcc -pthread -shared -Wl,-O2 -Wl,--sort-common -Wl,--as-needed -Wl,-z,relro "
     "-Wl,-z,now -Wl,--disable-new-dtags -Wl,--gc-sections -Wl,-rpath-link,/opt/conda/lib -L/opt/conda/lib"),
    ("python.org source built with LDFLAGS=-Wl,-rpath=<prefix>/lib --enable-shared (pypa/distutils#126's link "
     "line)",
     "gcc -pthread -shared -Wl,-rpath=/opt/cpython-3.9-debug/lib -Wl,--disable-new-dtags "
     "-Wl,-rpath,/opt/sundials-5.7.0-noklu-nolapack-dbg/lib -L/opt/sundials-5.7.0-noklu-nolapack-dbg/lib",
     "/opt/cpython-3.9-debug",
     "gcc -pthread -shared -Wl,--disable-new-dtags -Wl,-rpath,/opt/sundials-5.7.0-noklu-nolapack-dbg/lib "
     "-L/opt/sundials-5.7.0-noklu-nolapack-dbg/lib"),
    ("Debian 12 python3.11 (/usr/bin/python3), this machine: no rpath, left as it is",
     "x86_64-linux-gnu-gcc -shared -Wl,-O1 -Wl,-Bsymbolic-functions   -g -fwrapv -O2   ",
     "/usr",
     "x86_64-linux-gnu-gcc -shared -Wl,-O1 -Wl,-Bsymbolic-functions   -g -fwrapv -O2   "),
]


@pytest.mark.parametrize(("source", "value", "prefix", "expected"), REAL, ids=[r[0].split(" (")[0] for r in REAL])
def test_the_interpreters_rpath_is_left_out_of_real_link_lines(source, value, prefix, expected):
    assert without_rpath(value, [prefix]) == expected, source


def test_every_linker_spelling_of_an_rpath_into_the_prefix_is_left_out_and_nothing_else():
    p = ["/opt/py"]
    assert without_rpath("cc -shared -Wl,--enable-new-dtags,-rpath,/opt/py/lib -Wl,-O1", p) == \
        "cc -shared -Wl,--enable-new-dtags -Wl,-O1"
    assert without_rpath("cc -shared -Wl,-R/opt/py/lib -Wl,-R,/opt/py/lib64 -Wl,--rpath=/opt/py/lib", p) == \
        "cc -shared"
    assert without_rpath("cc -shared -Xlinker -rpath -Xlinker /opt/py/lib -Wl,-rpath -Wl,/opt/py/lib -lm", p) == \
        "cc -shared -lm"
    # a folder beside the prefix's stays, in the same option; one outside it, or a prefix-named sibling, stays
    assert without_rpath("cc -shared -Wl,-rpath,/opt/py/lib:/srv/lib -Wl,-rpath,/opt/python/lib", p) == \
        "cc -shared -Wl,-rpath,/srv/lib -Wl,-rpath,/opt/python/lib"
    assert without_rpath("cc -shared -Wl,-rpath,$ORIGIN/../lib", p) == "cc -shared -Wl,-rpath,$ORIGIN/../lib"


def test_what_the_build_exports_follows_setuptools_reading_of_the_environment():
    ours = sysconfig.get_config_var("LDSHARED") or ""
    has = without_rpath(ours, interpreter_prefixes()) != ours
    assert link_env({"LDSHARED": "cc -shared -Wl,-rpath,/x"}).get("LDSHARED") is None  # the recipe's/user's: as set
    if has:  # (this interpreter's LDSHARED has one: pyenv's here; the real lines above prove the filter anywhere)
        assert link_env({})["LDSHARED"] == without_rpath(ours, interpreter_prefixes())
        cc = sysconfig.get_config_var("CC")
        # CC set, LDSHARED not: setuptools (60 and later) starts LDSHARED with CC, and so does the value exported
        assert link_env({"CC": "clang"})["LDSHARED"] == "clang" + link_env({})["LDSHARED"][len(cc):]
    else:
        assert "LDSHARED" not in link_env({})


def _so(tmp: Path, *rpaths: str) -> Path:
    (tmp / "x.c").write_text("int x(void) { return 1; }\n")
    out = tmp / "x.so"
    flags = [f"-Wl,-rpath,{r}" for r in rpaths]
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,--enable-new-dtags", *flags, "-o", str(out), str(tmp / "x.c")],
                   check=True, timeout=120)
    return out


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_a_runpath_into_the_interpreters_prefix_is_named_and_origin_is_not(tmp_path):
    so = _so(tmp_path, "$ORIGIN/../lib", "/opt/py/3.11.7/lib", "/srv/other")
    with open(so, "rb") as f:
        obj = read_elf("pkg/x.so", f)
    assert obj.runpath == ("$ORIGIN/../lib", "/opt/py/3.11.7/lib", "/srv/other")
    built = WheelAudit("pkg-1.0-cp311-cp311-linux_x86_64.whl", "a" * 64, "pkg 1.0", "built", (obj,))
    lines = build_machine_paths([built], ["/opt/py/3.11.7"])
    assert len(lines) == 2, lines
    assert "RUNPATH /opt/py/3.11.7/lib, the build interpreter's prefix /opt/py/3.11.7" in lines[0]
    assert "RUNPATH /srv/other, a folder of the build machine" in lines[1]
    dependency = WheelAudit("dep-1.0-cp311-cp311-linux_x86_64.whl", "b" * 64, "dep 1.0", "dependency", (obj,))
    assert build_machine_paths([dependency], ["/opt/py/3.11.7"]) == []  # (what the build made, not what it pinned)


def _runpaths(out: Path, wheels: str = "demo_*.whl") -> dict[str, tuple[str, ...]]:
    """Each built shared object's RUNPATH/RPATH, read from the wheels beside the lock with the tool's ELF reader."""
    found = {}
    for wheel in sorted((out / "wheels").glob(wheels)):
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.endswith(".so"):
                    with z.open(name) as f:
                        found[name] = read_elf(name, f).runpath
    assert found, f"no shared object in {out / 'wheels'}/{wheels}"
    return found


def _lock_runpaths(lock: dict) -> list[str]:
    return [d for n in lock.get("native", []) for o in n.get("objects", []) for d in o.get("runpath", [])]


def test_a_demo_build_carries_no_runpath_into_the_interpreters_prefix(demo_build):
    prefixes = interpreter_prefixes()
    ours = sysconfig.get_config_var("LDSHARED") or ""
    runpaths = _runpaths(demo_build.out)
    assert any("demo_kernels/_C" in n for n in runpaths), runpaths
    for name, runpath in runpaths.items():
        assert not [d for d in runpath if d.startswith("/")], (name, runpath)
    assert _lock_runpaths(demo_build.lock()) == []
    assert "has RUNPATH" not in demo_build.result.stderr, demo_build.result.stderr
    logs = "".join(p.read_text(errors="replace") for p in (demo_build.out / "logs").glob("kernels.log"))
    if without_rpath(ours, prefixes) != ours:  # (pyenv's here): the build saw the flag and left it out
        assert f"# toolchain: LDSHARED={without_rpath(ours, prefixes)} (the build interpreter's" in logs, \
            "the kernels' build log does not say LDSHARED was derived"
    else:  # a Debian python: nothing to leave out (the real link lines above prove the filter)
        assert "# toolchain: LDSHARED=" not in logs


@pytest.mark.slow
def test_a_component_built_by_its_own_setup_py_command_carries_no_runpath_either(realstack_built):
    """The realstack's kernels build with `command = ["{python}", "setup.py", "bdist_wheel", ...]`, not through
    the PEP 517 call: the runner exports the derived LDSHARED for any command it starts."""
    prefixes = interpreter_prefixes()
    ours = sysconfig.get_config_var("LDSHARED") or ""
    runpaths = _runpaths(realstack_built.out, "realstack_*.whl")
    assert any("realstack_kernels/_C" in n for n in runpaths), runpaths
    for name, runpath in runpaths.items():
        assert not [d for d in runpath if d.startswith("/")], (name, runpath)
    assert _lock_runpaths(realstack_built.lock()) == []
    assert "has RUNPATH" not in realstack_built.result.stderr, realstack_built.result.stderr
    log = (realstack_built.out / "logs" / "kernels.log").read_text(errors="replace")
    if without_rpath(ours, prefixes) != ours:  # (pyenv's here)
        assert f"# toolchain: LDSHARED={without_rpath(ours, prefixes)} (the build interpreter's" in log


@pytest.mark.slow
@pytest.mark.container
def test_a_container_build_with_an_interpreter_that_adds_an_rpath_carries_none(podman_image, tmp_path):  # noqa: F811
    """In a container whose target interpreter is this one (its venv and prefix mounted read-only at the same
    paths: pyenv's here, whose LDSHARED adds `-Wl,-rpath,<prefix>/lib`), the runner in the container derives
    LDSHARED as on the host: the shared objects and the lock carry no RUNPATH."""
    prefixes = interpreter_prefixes()
    ours = sysconfig.get_config_var("LDSHARED") or ""
    if without_rpath(ours, prefixes) == ours:
        pytest.skip("this interpreter's LDSHARED adds no rpath: nothing to leave out (a pyenv build has one)")
    rdir = tmp_path / "recipes"
    rdir.mkdir()
    mounts = [f"--volume={d}:{d}:ro" for d in sorted({sys.prefix, sys.base_prefix})]
    (rdir / "inpod.toml").write_text(
        f'extends = "{REPO_ROOT / "recipes" / "demo.toml"}"\n[toolchain]\n'
        f'setvars = "{os.path.relpath(STANDIN_SETVARS, rdir)}"\n'  # (brought into the container by the runtime)
        f'[target]\nruntime = "podman"\nimage = "{podman_image}"\npython = "{sys.executable}"\n'
        f"run-args = {json.dumps(mounts)}\n")
    r = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})(
        "build", "--recipe", rdir / "inpod.toml", "--cache-dir", tmp_path / "cache", "--out", tmp_path / "out")
    assert r.returncode == 0, r
    runpaths = _runpaths(tmp_path / "out")
    assert any("demo_kernels/_C" in n for n in runpaths), runpaths
    for name, runpath in runpaths.items():
        assert not [d for d in runpath if d.startswith("/")], (name, runpath)
    assert _lock_runpaths(tomlkit.parse((tmp_path / "out" / "stack.lock.toml").read_text()).unwrap()) == []
    log = (tmp_path / "out" / "logs" / "kernels.log").read_text(errors="replace")
    assert f"# toolchain: LDSHARED={without_rpath(ours, prefixes)} (the build interpreter's" in log, log[-2000:]


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_an_ldshared_the_recipe_sets_is_used_as_set_and_its_runpath_named(tmp_path):
    prefix = (interpreter_prefixes() or [sys.base_prefix])[0]
    ldshared = f"{sysconfig.get_config_var('CC') or 'cc'} -shared -Wl,--enable-new-dtags,-rpath,{prefix}/lib"
    rdir = tmp_path / "recipes"
    rdir.mkdir()
    (rdir / "mine.toml").write_text(f'extends = "{REPO_ROOT / "recipes" / "demo.toml"}"\n[toolchain]\n'
                                    f'setvars = "{STANDIN_SETVARS}"\n[env]\nLDSHARED = "{ldshared}"\n')
    r = Cli(tmp_path, isolated_env(tmp_path))("build", "--recipe", rdir / "mine.toml", "--cache-dir",
                                              tmp_path / "cache", "--out", tmp_path / "out")
    assert r.returncode == 0, r
    kernels = {n: rp for n, rp in _runpaths(tmp_path / "out").items() if "demo_kernels/_C" in n}
    assert list(kernels.values()) == [(f"{prefix}/lib",)], kernels
    lock = tomlkit.parse((tmp_path / "out" / "stack.lock.toml").read_text()).unwrap()
    assert f"{prefix}/lib" in _lock_runpaths(lock)
    assert f"has RUNPATH {prefix}/lib" in r.stderr, r.stderr
