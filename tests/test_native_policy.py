"""The native audit's three verdicts (toolchain/data/native-policy.toml, toolchain.resolve.verdicts) on real ELF
objects compiled here with `cc` (tests/support/native_wheels.py: each needed library a stub linked and removed),
in wheels the tests write and in components `toolchain build` builds: an extension module needing
libze_loader.so.1 and libcuda.so.1 (expected from the run host: the build passes, the lock records them), a
plugin folder needing libmpi.so.40 and a library nobody ships (a warning, listed once), an extension needing a
library nobody provides (an error, with the recipe keys that answer it), a library of the wheel needing another
one level down. `toolchain doctor --lock` on a fake host root says which host libraries are present. A pip
configuration (PIP_CONFIG_FILE, a site-wide pip.conf under XDG_CONFIG_DIRS, PIP_* variables) with a conflicting
constraint cannot fail the fetch of locked files, a build, or change its lock."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.spine_helpers import GitRepo
from tests.support.fakehost import HOSTS
from tests.support.native_wheels import elf_object, setuptools_project, write_wheel
from toolchain.core.fs import sha256_file
from toolchain.recipe.model import NativeSpec
from toolchain.resolve import native, verdicts
from toolchain.resolve.closure import LockedDist
from toolchain.resolve.fetch import fetch_dists, locked_pip_env
from toolchain.resolve.policy import shipped_policy

EXT_NEEDS = ("libze_loader.so.1", "libcuda.so.1")
PLUGIN_NEEDS = ("libmpi.so.40", "libplugin_gone.so.2")


@pytest.fixture(scope="module")
def objects() -> dict[str, bytes]:
    """The compiled objects, once per module."""
    return {
        "gpukern/_C.abi3.so": elf_object([*EXT_NEEDS, "libgpukern_impl.so.1"], runpath="$ORIGIN/.libs"),
        "gpukern/.libs/libgpukern_impl.so.1": elf_object(["libdeep_gone.so.3"], soname="libgpukern_impl.so.1"),
        "gpukern/plugins/libbootstrap_mpi.so.3": elf_object(list(PLUGIN_NEEDS)),
        "gpukern/_orphan.abi3.so": elf_object(["libnobody.so.1"]),
    }


@pytest.fixture(scope="module")
def audit(objects, tmp_path_factory) -> native.WheelAudit:
    w = write_wheel(tmp_path_factory.mktemp("wheel"), "gpukern", "1.0", objects, tag="cp311-cp311-linux_x86_64")
    return native.audit_wheel(w, sha256_file(w), None, dist="gpukern 1.0", role="built")


def test_three_verdicts_on_compiled_objects(audit):
    c = next(o for o in audit.objects if o.path == "gpukern/_C.abi3.so")
    assert c.needed[:3] == (*EXT_NEEDS, "libgpukern_impl.so.1") and c.runpath == ("$ORIGIN/.libs",)
    # what an import loads: the extension modules, and (one level down, through $ORIGIN) the wheel's library
    assert verdicts.loaded_objects(audit) == {"gpukern/_C.abi3.so", "gpukern/.libs/libgpukern_impl.so.1",
                                              "gpukern/_orphan.abi3.so"}
    report = verdicts.check([audit], native.Providers(), shipped_policy(), at="build")
    assert {n.soname for n in report.errors} == {"libdeep_gone.so.3", "libnobody.so.1"}
    assert {n.soname for n in report.warnings} == {"libplugin_gone.so.2"}  # only the plugin needs it
    assert report.need("libgpukern_impl.so.1").verdict == "provided"  # the wheel's own
    for so, group in (("libze_loader.so.1", "the GPU driver"), ("libcuda.so.1", "the GPU driver"),
                      ("libmpi.so.40", "the cluster fabric"), ("libc.so.6", "the base system")):
        need = report.need(so)
        assert need.verdict == "host" and need.source == f"from {group}" and not need.fatal
    assert report.need("libdeep_gone.so.3").files == ("gpukern 1.0: gpukern/.libs/libgpukern_impl.so.1",)
    with pytest.raises(verdicts.NativeABIError) as raised:
        verdicts.raise_for(report, "the lock", shipped_policy(), None)
    assert "[native] host-provides = [" in (raised.value.hint or "")
    # the recipe's [native]: one from the host, one ignored
    policy = shipped_policy().with_recipe(NativeSpec(host_provides=("libdeep_gone.so.*",), ignore=("libnobody.so.1",)))
    report = verdicts.check([audit], native.Providers(), policy, at="build")
    assert report.errors == ()
    assert report.need("libdeep_gone.so.3").source == "from the recipe's [native] host-provides"
    assert report.need("libnobody.so.1").verdict == "ignored"
    (recorded,) = verdicts.with_host_provides([audit], report)
    assert set(recorded.host_provides) == {*EXT_NEEDS, "libmpi.so.40", "libc.so.6", "libdeep_gone.so.3"}


def test_where_the_stack_runs_an_absent_host_library_is_named_with_its_package(audit):
    """At run (smoke): a host library present on the target's loader path is there; an absent one an extension
    module loads is an error naming the package that brings it; one only a plugin needs is a warning."""
    policy = shipped_policy().with_recipe(NativeSpec(ignore=("libnobody.so.1", "libdeep_gone.so.3")))
    present = {"libc.so.6": "/lib/x86_64-linux-gnu/libc.so.6", "libcuda.so.1": "/usr/lib/libcuda.so.1"}
    report = verdicts.check([audit], native.Providers(system=present), policy, at="run")
    assert report.need("libcuda.so.1").verdict == "host" and "/usr/lib/libcuda.so.1" in report.need("libcuda.so.1").source
    assert [n.soname for n in report.errors] == ["libze_loader.so.1"]
    assert report.need("libze_loader.so.1").verdict == "host-absent"
    assert report.need("libmpi.so.40").verdict == "host-absent" and not report.need("libmpi.so.40").fatal
    with pytest.raises(verdicts.NativeABIError) as raised:
        verdicts.raise_for(report, "the smoke target", policy, None)
    assert "apt install libze1" in (raised.value.hint or "")


def test_a_long_listing_stops_at_ten_lines_naming_the_log(tmp_path):
    needs = [f"libgone{i:02d}.so.1" for i in range(12)]
    w = write_wheel(tmp_path, "many", "1.0", {"many/_m.abi3.so": elf_object(needs)}, tag="cp311-cp311-linux_x86_64")
    audit = native.audit_wheel(w, sha256_file(w), None, dist="many 1.0", role="built")
    report = verdicts.check([audit], native.Providers(), shipped_policy(), at="build")
    assert len(report.errors) == 12
    with pytest.raises(verdicts.NativeABIError) as raised:
        verdicts.raise_for(report, "the lock", shipped_policy(), tmp_path / "native.log")
    lines = str(raised.value).splitlines()[1:]
    assert len(lines) == 10 and lines[:9] == [f"  - {so}: missing; needed by 1 file in many 1.0" for so in needs[:9]]
    assert lines[-1] == f"  and 4 more (all in {tmp_path / 'native.log'})"  # 3 sonames and the host line


def _component(tmp_path: Path, objects: dict[str, bytes], names: list[str]) -> GitRepo:
    repo = GitRepo.create(tmp_path / "gpukern")
    files: dict[str, str] = {"gpukern/__init__.py": "", "gpukern/plugins/__init__.py": "", "pyproject.toml":
                             setuptools_project("gpukern", setuptools=textwrap.dedent("""\
                                 packages = ["gpukern", "gpukern.plugins"]
                                 [tool.setuptools.package-data]
                                 gpukern = ["*.so", ".libs/*"]
                                 "gpukern.plugins" = ["*.so.*"]
                                 """))}
    for name in names:
        path = repo.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(objects[name])
    repo.commit("compiled objects", files)
    return repo


def _recipe(ws, name: str, repo: GitRepo, extra: str = "") -> None:
    ws.recipe(name, textwrap.dedent(f"""\
        [toolchain]
        setvars = ""
        [target]
        python = "{sys.executable}"
        [components.gpukern]
        url = "{repo.url}"
        commit = "{repo.head()}"
        [resolve]
        indexes = []
        """) + extra)


def test_a_build_box_without_the_gpu_driver_builds_and_the_lock_says_what_the_host_must_have(ws, objects, tmp_path):
    """No libze_loader, no libcuda, no MPI here: the build passes, the lock records them as host-provides, the
    plugin's unknown library is one warning; `toolchain doctor --lock` on a fake B70 root that has the Level
    Zero loader and MPI (through ld.so.conf.d) says which are present and what brings libcuda.so.1."""
    repo = _component(tmp_path, objects, ["gpukern/_C.abi3.so", "gpukern/plugins/libbootstrap_mpi.so.3"])
    _recipe(ws, "kern", repo, '[native]\nhost-provides = ["libgpukern_impl.so.1"]\n')
    r = ws.build("kern")
    assert r.returncode == 0, str(r)
    assert r.output.count("libplugin_gone.so.2: missing; needed by 1 file in gpukern 1.0") == 1, r.output
    (audit,) = ws.lock()["native"]
    assert audit["host-provides"] == sorted(["libc.so.6", *EXT_NEEDS, "libmpi.so.40", "libgpukern_impl.so.1"])
    root = HOSTS["b70x2"].make(ws.root / "host")
    for d, name in (("usr/lib/x86_64-linux-gnu", "libze_loader.so.1"), ("usr/lib/x86_64-linux-gnu", "libc.so.6"),
                    ("opt/openmpi/lib", "libmpi.so.40")):
        (root / d).mkdir(parents=True, exist_ok=True)
        (root / d / name).write_bytes(b"")
    (root / "etc/ld.so.conf.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (root / "etc/ld.so.conf.d/openmpi.conf").write_text("/opt/openmpi/lib\n")
    doc = ws.cli.ok("doctor", "--lock", ws.root / "out", "--json", env={"TOOLCHAIN_HOST_ROOT": str(root)}).json()
    found = {f["topic"]: f for f in doc["findings"]}
    summary = found["host libraries"]
    assert summary["status"] == "warn" and summary["value"].startswith("3 of the 5 kern expects")
    assert all(so in summary["value"] for so in ("libze_loader.so.1", "libmpi.so.40", "libc.so.6"))
    cuda = found["host library libcuda.so.1"]
    assert cuda["status"] == "missing" and cuda["fix"] == "apt install libnvidia-compute-<driver version> (NVIDIA's GPU driver)"
    assert found["host library libgpukern_impl.so.1"]["status"] == "missing"  # the module loads it
    assert "host library libze_loader.so.1" not in found


def test_an_extension_needing_what_nobody_provides_fails_the_build_with_the_key_that_answers(ws, objects, tmp_path):
    repo = _component(tmp_path, objects, ["gpukern/_orphan.abi3.so", "gpukern/_C.abi3.so",
                                          "gpukern/.libs/libgpukern_impl.so.1"])
    _recipe(ws, "orphan", repo)
    r = ws.build("orphan")
    assert r.returncode == 1, str(r)
    err = r.json()
    assert err["kind"] == "NativeABIError"
    lines = err["error"].splitlines()
    assert len(lines) <= 11
    assert "  - libnobody.so.1: missing; needed by 1 file in gpukern 1.0" in lines
    assert "  - libdeep_gone.so.3: missing; needed by 1 file in gpukern 1.0" in lines  # one level down
    assert '[native] host-provides = ["libdeep_gone.so.3", "libnobody.so.1"]' in err["hint"]
    assert not (ws.root / "out" / "stack.lock.toml").exists()
    assert "gpukern 1.0: gpukern/.libs/libgpukern_impl.so.1" in (ws.root / "out" / "logs" / "native.log").read_text()
    # the fix the hint names, as written: the build passes and the lock records them
    _recipe(ws, "orphan", repo, '[native]\nhost-provides = ["libdeep_gone.so.3", "libnobody.so.1"]\n')
    r = ws.build("orphan")
    assert r.returncode == 0, str(r)
    (audit,) = ws.lock()["native"]
    assert {"libnobody.so.1", "libdeep_gone.so.3"} <= set(audit["host-provides"])


def test_a_pure_python_component_over_a_closure_with_native_plugins_builds_and_its_bundle_reads_them(ws, objects,
                                                                                                      tmp_path):
    """A pure-Python component requiring `fabricdep` (a wheel of the compiled objects, in a find-links folder):
    the build knows the closure by its file list (no objects read, nothing fetched) and passes; a bundle made
    --with-deps, whose files are fetched anyway, reads them: what they need and nobody ships is one warning a
    soname (never fatal: no component loads them), logged."""
    links = tmp_path / "links"
    write_wheel(links, "fabricdep", "1.0", objects, tag="cp311-cp311-linux_x86_64")
    repo = GitRepo.create(tmp_path / "pure")
    repo.commit("pure Python", {"pyproject.toml": setuptools_project("pure", dependencies=["fabricdep"])})
    _recipe(ws, "pure", repo, "")
    text = (ws.recipes / "pure.toml").read_text().replace("[components.gpukern]", "[components.pure]")
    (ws.recipes / "pure.toml").write_text(text.replace("indexes = []", f'indexes = []\nfind-links = ["{links}"]'))
    r = ws.build("pure")
    assert r.returncode == 0, str(r)
    dep = next(a for a in ws.lock()["native"] if a["dist"] == "fabricdep 1.0")
    assert dep["role"] == "dependency" and not dep["objects"] and "gpukern/_C.abi3.so" in dep["libraries"]
    assert "libnobody.so.1" not in r.output
    r = ws.build("pure", "out", "--bundle", "--with-deps")
    assert r.returncode == 0, str(r)
    for so in ("libnobody.so.1", "libdeep_gone.so.3", "libplugin_gone.so.2"):
        assert r.output.count(f"{so}: missing; needed by 1 file in fabricdep 1.0") == 1, r.output
    assert "fabricdep 1.0: gpukern/plugins/libbootstrap_mpi.so.3" in (
        ws.root / "out" / "logs" / "native-closure.log").read_text()


def test_a_recipe_native_table_is_checked(ws, tmp_path):
    ws.recipe("bad", '[native]\nhost-provides = ["lib/x.so"]\nignor = []\n[components.x]\nprebuilt = "x==1"\n')
    r = ws.cli("plan", "--recipe", "bad", "--json")
    assert r.returncode == 2, str(r)
    assert "native.host-provides" in r.output and "native.ignor" in r.output


# ---- pip's configuration ------------------------------------------------------------------------------------

def _conflicting_config(tmp_path: Path) -> dict[str, str]:
    """A constraint torch<=2.14.1 three ways: a PIP_CONFIG_FILE, a site-wide pip.conf under a fake
    XDG_CONFIG_DIRS, PIP_CONSTRAINT; and PIP_NO_BINARY=:all: (no wheel at all)."""
    for name in ("named", "site"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "constraints.txt").write_text("torch<=2.14.1\nstandin-dep<2\n")
    (tmp_path / "named" / "pip.conf").write_text(f"[global]\nconstraint = {tmp_path / 'named' / 'constraints.txt'}\n")
    (tmp_path / "site" / "pip").mkdir()
    (tmp_path / "site" / "pip" / "pip.conf").write_text(
        f"[global]\nconstraint = {tmp_path / 'site' / 'constraints.txt'}\ntimeout = 77\n")
    return {"PIP_CONFIG_FILE": str(tmp_path / "named" / "pip.conf"), "XDG_CONFIG_DIRS": str(tmp_path / "site"),
            "PIP_CONSTRAINT": str(tmp_path / "site" / "constraints.txt"), "PIP_NO_BINARY": ":all:"}


def test_the_locked_pip_environment_keeps_how_to_reach_the_index_and_nothing_else(tmp_path):
    env = {**_conflicting_config(tmp_path), "PIP_CERT": "/etc/ssl/certs/ca.pem", "PIP_INDEX_URL": "https://x.invalid/",
           "PIP_FIND_LINKS": "/opt/wheels", "PIP_PRE": "1", "HOME": str(tmp_path)}
    layer = locked_pip_env(env)
    assert layer["PIP_CONFIG_FILE"] == os.devnull
    for name in ("PIP_CONSTRAINT", "PIP_NO_BINARY", "PIP_INDEX_URL", "PIP_FIND_LINKS", "PIP_PRE"):
        assert layer[name] is None  # removed
    assert "PIP_CERT" not in layer  # kept as it is
    assert layer["PIP_TIMEOUT"] == "77"  # the site-wide pip.conf's transport setting, its constraint left out
    assert all(v is None or "constraints" not in v for v in layer.values())


def test_a_locked_fetch_reads_no_pip_configuration(tmp_path, monkeypatch):
    """torch 2.15.0 pinned by the lock (a stand-in wheel): pip with the conflicting configuration refuses it
    (shown first, so the configuration really conflicts); the locked fetch takes it."""
    w = write_wheel(tmp_path / "index", "torch", "2.15.0", {"torch/__init__.py": b""})
    dist = LockedDist(name="torch", version="2.15.0", file=w.name, url=w.as_uri(), sha256=sha256_file(w))
    env = _conflicting_config(tmp_path)
    reqs = tmp_path / "reqs.txt"
    reqs.write_text(f"torch @ {w.as_uri()} --hash=sha256:{dist.sha256}\n")
    plain = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-index", "--require-hashes",
                            "-d", str(tmp_path / "plain"), "-r", str(reqs)], env={**os.environ, **env},
                           capture_output=True, text=True, timeout=300)
    assert plain.returncode != 0 and "torch" in plain.stderr, plain.stderr
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    got = fetch_dists([dist], tmp_path / "deps", tmp_path / "fetch.log")
    assert sha256_file(got["torch"]) == dist.sha256


def test_a_pip_configuration_cannot_fail_a_build_or_change_its_lock(ws, tmp_path):
    """A component requiring standin-dep (2.0 in a find-links folder), built with and without a pip
    configuration whose constraint says standin-dep<2: the same lock pins."""
    links = tmp_path / "links"
    write_wheel(links, "standin-dep", "2.0", {"standin_dep/__init__.py": b""})
    repo = GitRepo.create(tmp_path / "needs-dep")
    repo.commit("needs standin-dep", {"pyproject.toml": setuptools_project("needs-dep", dependencies=["standin-dep"])})
    ws.recipe("dep", textwrap.dedent(f"""\
        [toolchain]
        setvars = ""
        [target]
        python = "{sys.executable}"
        [components.needs-dep]
        url = "{repo.url}"
        commit = "{repo.head()}"
        [resolve]
        indexes = []
        find-links = ["{links}"]
        """))
    plain = ws.build("dep", "plain")
    assert plain.returncode == 0, str(plain)
    configured = ws.build("dep", "configured", env={k: v for k, v in _conflicting_config(tmp_path).items()
                                                    if k != "PIP_NO_BINARY"})
    assert configured.returncode == 0, str(configured)
    assert ws.lock("configured")["dependencies"] == ws.lock("plain")["dependencies"]
    assert [d["version"] for d in ws.lock("configured")["dependencies"]] == ["2.0"]
