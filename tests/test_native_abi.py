"""The native ABI audit on real PyPI wheels (tests/support/native_wheels.py, downloaded once and cached):
vllm-xpu-kernels 0.1.16.2 needs libsycl.so.9; intel-sycl-rt 2025.x provides libsycl.so.8, 2026.x libsycl.so.9.
Both outcomes are reached: provided (by the closure, or by the target's oneAPI library path) and missing,
named with who could provide it; and through `toolchain build`, at lock time."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.spine_helpers import REPO_ROOT, GitRepo
from tests.support.native_wheels import wheel
from toolchain.core.fs import sha256_file
from toolchain.core.serial import from_data, to_table
from toolchain.recipe.model import TargetSpec
from toolchain.resolve import native
from toolchain.resolve.closure import LockedDist
from toolchain.target.host import HostRuntime

pytestmark = pytest.mark.slow
XPU_C = "vllm_xpu_kernels/_xpu_C.abi3.so"


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """Each real wheel audited once into a cache (what the tool keeps under <cache>/native/)."""
    cache = tmp_path_factory.mktemp("native-cache")
    found = {}
    for name, dist, role in (("kernels", "vllm-xpu-kernels 0.1.16.2", "prebuilt"),
                             ("sycl8", "intel-sycl-rt", "dependency"), ("sycl9", "intel-sycl-rt", "dependency")):
        w = wheel(name)
        version = w.name.split("-")[1]
        found[name] = native.audit_wheel(w, sha256_file(w), cache, dist=dist if name == "kernels" else
                                         f"{dist} {version}", role=role)
    return cache, found


@pytest.fixture(scope="module")
def system(audited):
    """The system loader path of this machine, as the target probe lists it."""
    return native.target_providers(HostRuntime(TargetSpec()), sys.executable, [], "")


def test_the_audit_records_needed_sonames_and_compiler_stamps(audited):
    _, a = audited
    xpu_c = next(o for o in a["kernels"].objects if o.path == XPU_C)
    assert {"libsycl.so.9", "libtorch_xpu.so", "libc10_xpu.so", "libze_loader.so.1"} <= set(xpu_c.needed)
    assert "Intel(R) oneAPI DPC++/C++ Compiler 2026.1.0 (2026.1.0.20260617)" in xpu_c.compilers
    assert "libsycl.so.8" in a["sycl8"].provides() and "libsycl.so.9" not in a["sycl8"].provides()
    assert "libsycl.so.9" in a["sycl9"].provides()
    assert from_data(native.WheelAudit, to_table(a["kernels"])) == a["kernels"]  # as a lock records it


def _sycl_errors(report: native.NativeReport) -> list[str]:
    return [e for e in report.errors if e.startswith("libsycl.so.9 needed by ")]


def test_libsycl_9_provided_by_the_closure_or_missing_with_its_providers(audited, system):
    _, a = audited
    with_9 = native.check([a["kernels"], a["sycl9"]], native.Providers("2026.1.0", {}, system.system), where="x")
    assert _sycl_errors(with_9) == []  # provided by the closure's intel-sycl-rt 2026.x
    assert with_9.warnings == ()  # the kernels were compiled by the captured oneAPI's 2026.1
    with_8 = native.check([a["kernels"], a["sycl8"]], native.Providers("2025.3.1", {}, system.system),
                          where="the lock")
    sycl = _sycl_errors(with_8)
    assert sycl, with_8.errors
    first = next(e for e in sycl if e.startswith(f"libsycl.so.9 needed by {XPU_C} (vllm-xpu-kernels 0.1.16.2): "))
    version8 = wheel("sycl8").name.split("-")[1]
    assert f"the closure's intel-sycl-rt {version8} provides libsycl.so.8" in first
    assert "intel-sycl-rt 2026.x (oneAPI 2026.x) provides libsycl.so.9" in first
    # libtorch is needed too and nothing here provides it: named with who does
    assert any(e.startswith("libtorch_xpu.so needed by") and "torch (the XPU build" in e for e in with_8.errors)
    # a compiler stamp other than the captured oneAPI is a warning, not an error
    (warning,) = with_8.warnings
    assert "Compiler 2026.1.0" in warning and "2025.3.1" in warning
    with pytest.raises(native.NativeABIError, match="libsycl.so.9 needed by"):
        native.raise_for(with_8, "the lock")


def _oneapi_lib(name: str, soname: str, lib: Path) -> Path:
    """A oneAPI-like library folder holding the real `soname` taken out of the cached intel-sycl-rt wheel."""
    lib.mkdir(parents=True)
    with zipfile.ZipFile(wheel(name)) as z:
        member = next(n for n in z.namelist() if n.endswith(f"/lib/{soname}"))
        (lib / soname).write_bytes(z.read(member))
    return lib


def test_the_targets_oneapi_library_path_provides(audited, tmp_path):
    """setvars' LD_LIBRARY_PATH holding oneAPI 2026's real libsycl.so.9 (taken out of the 2026 wheel)."""
    _, a = audited
    lib = _oneapi_lib("sycl9", "libsycl.so.9", tmp_path / "oneapi" / "lib")
    providers = native.target_providers(HostRuntime(TargetSpec()), sys.executable,
                                        native.library_dirs({"LD_LIBRARY_PATH": f"/nonexistent:{lib}"}), "2026.1.0")
    assert providers.oneapi == {"libsycl.so.9": str(lib)}
    assert _sycl_errors(native.check([a["kernels"], a["sycl8"]], providers, where="x")) == []


class _CountingHost(HostRuntime):
    """The host runtime, counting the commands it runs (each a probe interpreter)."""

    runs = 0

    def run(self, argv, **kw):
        self.runs += 1
        return super().run(argv, **kw)


def test_the_hosts_library_listing_is_remembered_until_a_listed_folder_changes(tmp_path):
    """A build into a new --out lists the host's libraries from the memo (no interpreter, no ldconfig); a library
    added to a listed folder lists them again; a base image's installed listing is never remembered."""
    lib = tmp_path / "oneapi" / "lib"
    lib.mkdir(parents=True)
    runtime, memo = _CountingHost(TargetSpec()), tmp_path / "memo"
    first = native.target_providers(runtime, sys.executable, [str(lib)], "2026.1.0", memo_dir=memo)
    assert runtime.runs == 1 and first.system and first.oneapi == {}
    again = native.target_providers(runtime, sys.executable, [str(lib)], "2025.3.1", memo_dir=memo)
    assert runtime.runs == 1  # remembered
    assert again == native.Providers("2025.3.1", first.oneapi, first.system)  # the version is the caller's
    (lib / "libsycl.so.9").write_bytes(b"stand-in\n")
    added = native.target_providers(runtime, sys.executable, [str(lib)], "2026.1.0", memo_dir=memo)
    assert runtime.runs == 2 and added.oneapi == {"libsycl.so.9": str(lib)}
    for _ in range(2):
        native.target_providers(runtime, sys.executable, [str(lib)], "", installed=True, memo_dir=memo)
    assert runtime.runs == 4


def _runtime_wheel(folder: Path, soname: str) -> Path:
    """A small stand-in runtime wheel that ships `lib/<soname>` under the environment's lib/ (the wheel's data
    scheme), as intel-sycl-rt ships libsycl.so.N; its bytes are a marker, not a library: only the name counts."""
    import base64
    import hashlib

    name, version = "standin_sycl_rt", "9.0"
    files = {f"{name}-{version}.data/data/lib/{soname}": b"stand-in, not a library\n",
             f"{name}/__init__.py": b"",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: standin-sycl-rt\nVersion: {version}\n".encode(),
             f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},{len(b)}\n"
                     for n, b in files.items()) + f"{name}-{version}.dist-info/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for n, b in files.items():
            z.writestr(n, b)
        z.writestr(f"{name}-{version}.dist-info/RECORD", record)
    return path


def test_over_a_base_image_what_its_interpreter_installed_provides(audited, tmp_path):
    """Over a base image, the stack the wheels are installed over provides libraries through the distributions
    its interpreter has installed (intel-sycl-rt puts libsycl.so.N under the environment's lib/, listed in its
    RECORD). A venv stands for the image's interpreter; pip installs the stand-in runtime wheel into it."""
    _, a = audited
    venv = tmp_path / "stack"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
                                "--no-index", str(_runtime_wheel(tmp_path, "libsycl.so.9"))],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    assert (venv / "lib" / "libsycl.so.9").is_file()  # where pip put it: the environment's lib/, not site-packages
    runtime = HostRuntime(TargetSpec())
    providers = native.target_providers(runtime, python, [], "", installed=True)
    assert providers.installed.get("libsycl.so.9") == "standin-sycl-rt"
    assert _sycl_errors(native.check([a["kernels"]], providers, where="x")) == []
    unread = native.target_providers(runtime, python, [], "")  # the stack not read: libsycl.so.9 is missing
    assert providers.system == unread.system and unread.installed == {}
    assert _sycl_errors(native.check([a["kernels"]], unread, where="x"))
    other = tmp_path / "other"
    other.mkdir()
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
                                "--no-index", "--force-reinstall", str(_runtime_wheel(other, "libsycl.so.8"))],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    errors = _sycl_errors(native.check([a["kernels"]], native.target_providers(runtime, python, [], "",
                                                                              installed=True), where="x"))
    assert errors and all("the target's installed standin-sycl-rt provides libsycl.so.8" in e for e in errors)


def test_a_cached_audit_never_imports_the_elf_reader(audited):
    cache, a = audited
    w = wheel("sycl9")
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from toolchain.resolve.native import audit_wheel
        got = audit_wheel(Path({str(w)!r}), {a['sycl9'].sha256!r}, Path({str(cache)!r}))
        print(len(got.objects), 'elftools' in sys.modules)
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert r.stdout.split() == [str(len(a["sycl9"].objects)), "False"], r.stderr


def test_closure_wheels_are_read_from_their_file_urls(audited, tmp_path):
    cache, a = audited
    w = wheel("sycl8")
    dist = LockedDist("intel-sycl-rt", w.name.split("-")[1], w.name, w.as_uri(), a["sycl8"].sha256)
    (got,) = native.audit_wheels([], [dist], cache, tmp_path / "deps", tmp_path / "fetch.log")
    assert got.objects == a["sycl8"].objects and got.role == "dependency"
    assert not (tmp_path / "deps").exists()  # nothing fetched: the file was at hand


def test_a_build_whose_closure_needs_libsycl_9_against_oneapi_2025_fails_at_lock_time(ws, audited, tmp_path):
    """A component requiring the real kernels wheel (find-links), built with a setvars whose library path holds
    oneAPI 2025's libsycl.so.8: exit 1 before any lock is written, naming soname, file and providers."""
    cache, _ = audited
    lib = _oneapi_lib("sycl8", "libsycl.so.8", tmp_path / "oneapi-2025" / "lib")
    setvars = tmp_path / "oneapi-2025" / "setvars.sh"
    setvars.write_text(f"# TEST setvars (not oneAPI): its library path holds oneAPI 2025's libsycl.so.8\n"
                       f"export CMPLR_ROOT={lib.parent}\nexport LD_LIBRARY_PATH={lib}\n")
    repo = GitRepo.create(tmp_path / "needs-kernels")
    repo.commit("a package that needs the kernels", {
        "pyproject.toml": textwrap.dedent("""\
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "needs-kernels"
            version = "1.0"
            dependencies = ["vllm-xpu-kernels==0.1.16.2"]
            [tool.setuptools]
            py-modules = []
            """)})
    ws.recipe("abi", textwrap.dedent(f"""\
        [toolchain]
        setvars = "{setvars}"
        [components.needs-kernels]
        url = "{repo.url}"
        commit = "{repo.head()}"
        [resolve]
        indexes = []
        find-links = ["{wheel('kernels').parent}"]
        """))
    shutil.copytree(cache / native.NATIVE_DIR, ws.cache / native.NATIVE_DIR)  # the 150 MB read once per session
    r = ws.build("abi")
    assert r.returncode == 1, str(r)
    err = r.json()
    assert err["kind"] == "NativeABIError"
    line = next(x for x in err["error"].splitlines() if f"libsycl.so.9 needed by {XPU_C}" in x)
    assert f"the target's oneAPI  ({lib}) provides libsycl.so.8".replace("  ", " ") in line
    assert "intel-sycl-rt 2026.x (oneAPI 2026.x) provides libsycl.so.9" in line
    assert not (ws.root / "out" / "stack.lock.toml").exists()


def test_the_demo_lock_records_the_audit_and_the_box(demo_build):
    lock = demo_build.lock()
    wheels = {a["wheel"] for a in lock["native"]}
    assert {c["wheel"]["file"] for c in lock["components"]} <= wheels
    assert {d["file"] for d in lock["dependencies"] if d["file"].endswith(".whl")} <= wheels
    kernels = next(a for a in lock["native"] if a["wheel"].startswith("demo_kernels-"))
    (obj,) = kernels["objects"]  # the demo's C extension, compiled by the host's gcc (the stand-in has no icpx)
    assert obj["file"].startswith("demo_kernels/_C.") and obj["compilers"][0].startswith("GCC: ")
    assert kernels["role"] == "built" and kernels["sha256"] in {c["wheel"]["sha256"] for c in lock["components"]}
    assert lock["host"]["kernel"] == Path("/proc/sys/kernel/osrelease").read_text().strip()


def test_provided_by_oneapi_at_build_and_missing_where_smoke_serves_without_it(ws, tmp_path):
    """A wheel holding a real shared object linked against oneAPI 2026's libsycl.so.9: the build passes (setvars'
    library path provides it), smoke stops before serving (it serves without oneAPI and the closure has no
    intel-sycl-rt), naming the soname, the file and who ships it."""
    from tests.smoke.smoke_helpers import fault_cmd

    lib = _oneapi_lib("sycl9", "libsycl.so.9", tmp_path / "oneapi-2026" / "lib")
    setvars = lib.parent / "setvars.sh"
    setvars.write_text(f"# TEST setvars (not oneAPI): its library path holds oneAPI 2026's libsycl.so.9\n"
                       f"export CMPLR_ROOT={lib.parent}\nexport LD_LIBRARY_PATH={lib}\n")
    repo = GitRepo.create(tmp_path / "needy")
    (repo.path / "needy").mkdir()
    (repo.path / "n.c").write_text("int needy(void) { return 7; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", "needy/libneedy.so", "n.c", f"-L{lib}", "-Wl,--no-as-needed",
                    "-l:libsycl.so.9"], cwd=repo.path, check=True, timeout=120)
    repo.commit("a package shipping a library that needs libsycl.so.9", {
        "needy/__init__.py": "",
        "pyproject.toml": textwrap.dedent("""\
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "needy"
            version = "1.0"
            [tool.setuptools]
            packages = ["needy"]
            [tool.setuptools.package-data]
            needy = ["*.so"]
            """)})
    ws.recipe("needy", textwrap.dedent(f"""\
        [toolchain]
        setvars = "{setvars}"
        [components.needy]
        url = "{repo.url}"
        commit = "{repo.head()}"
        [resolve]
        indexes = []
        """))
    r = ws.build("needy")
    assert r.returncode == 0, str(r)
    (audit,) = ws.lock()["native"]
    assert audit["objects"] == [{"file": "needy/libneedy.so", "needed": ["libsycl.so.9", "libc.so.6"],
                                 "compilers": audit["objects"][0]["compilers"]}]
    r = ws.cli("smoke", "--lock", ws.root / "out", "--skip-device-check", "--serve-cmd", fault_cmd("healthy"),
               "--cases", "math", "--out", ws.root / "smoke", "--json")
    assert r.returncode == 1, str(r)
    err = r.json()
    assert err["kind"] == "NativeABIError", str(r)
    line = next(x for x in err["error"].splitlines() if "libsycl.so.9 needed by needy/libneedy.so (needy 1.0)" in x)
    assert "intel-sycl-rt 2026.x (oneAPI 2026.x) provides libsycl.so.9" in line
    report = json.loads((ws.root / "smoke" / "report.json").read_text())
    assert report["verdict"] == "fail" and "served" not in report  # stopped before serving
