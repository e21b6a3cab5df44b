"""The native ABI audit on real PyPI wheels (tests/support/native_wheels.py, downloaded once and cached):
vllm-xpu-kernels 0.1.16.2 needs libsycl.so.9; intel-sycl-rt 2025.3.3 provides libsycl.so.8, 2026.2.0
libsycl.so.9. Both outcomes are reached: provided (by the closure, known by its wheel's file list, or by the
target's oneAPI library path) and missing, named with who ships it in at most 10 lines; the closure's file list
read by HTTP range requests (a few hundred KB of a 114 MB wheel); and through `toolchain build`, at lock time."""

from __future__ import annotations

import http.server
import json
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import zipfile
from pathlib import Path

import pytest

from tests.spine_helpers import REPO_ROOT, GitRepo, lock_and_record
from tests.support.native_wheels import setuptools_project, wheel, write_wheel
from toolchain.core.fs import sha256_file
from toolchain.core.serial import from_data, to_table
from toolchain.recipe.model import TargetSpec
from toolchain.resolve import native, verdicts, wheelfiles
from toolchain.resolve.closure import LockedDist
from toolchain.resolve.policy import shipped_policy
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


def _closure_dist(name: str) -> LockedDist:
    w = wheel(name)
    return LockedDist(name="intel-sycl-rt", version=w.name.split("-")[1], file=w.name, url=w.as_uri(),
                      sha256=sha256_file(w))


def _check(audits, providers=None):
    return verdicts.check(audits, providers or native.Providers(), shipped_policy(), at="build")


def test_the_released_kernels_over_sycl_2025_fail_in_ten_lines_naming_what_ships_each(audited, system, tmp_path):
    """The kernels (prebuilt) with a closure whose intel-sycl-rt is 2025.3.3 (known by its file list alone) and
    no torch XPU build: missing libsycl.so.9 (intel-sycl-rt 2026.x) and libtorch_xpu.so/libc10_xpu.so (a torch
    XPU build); libze_loader.so.1 expected from the run host; at most 10 lines, the fix with recipe keys."""
    cache, a = audited
    closure = native.audit_wheels([], [_closure_dist("sycl8")], cache, tmp_path / "deps", tmp_path / "log",
                                  read_deps=False)
    assert not (tmp_path / "deps").exists() and closure[0].objects == ()  # the file list only, nothing fetched
    assert "libsycl.so.8" in closure[0].provides()
    report = _check([a["kernels"], *closure], native.Providers("2025.3.1", {}, system.system))
    with pytest.raises(verdicts.NativeABIError) as raised:
        verdicts.raise_for(report, "the lock", shipped_policy(), tmp_path / "native.log")
    lines = str(raised.value).splitlines()
    assert len(lines) <= 11, lines  # the headline and at most 10
    sycl = next(x for x in lines if x.startswith("  - libsycl.so.9: missing; needed by 12 files in "
                                                   "vllm-xpu-kernels 0.1.16.2"))
    assert "the closure's intel-sycl-rt 2025.3.3 has libsycl.so.8" in sycl
    assert "shipped by intel-sycl-rt 2026.x" in sycl
    for so in ("libtorch_xpu.so", "libc10_xpu.so"):
        line = next(x for x in lines if x.startswith(f"  - {so}: missing;"))
        assert "shipped by a torch XPU build" in line
    host = next(x for x in lines if "expected from the run host" in x)
    assert "libze_loader.so.1 (the GPU driver)" in host
    assert report.need("libze_loader.so.1").verdict == "host"
    hint = raised.value.hint or ""
    assert '[components.intel-sycl-rt] prebuilt = "intel-sycl-rt==2026.2.0"' in hint
    assert '[components.torch] prebuilt = "torch==2.14.0+xpu"' in hint and "download.pytorch.org/whl/xpu" in hint
    assert "[native] host-provides = [" in hint
    # a compiler stamp other than the captured oneAPI's is a warning, not an error
    (stamp,) = report.stamps
    assert "Compiler 2026.1.0" in stamp and "2025.3.1" in stamp


def test_with_sycl_2026_in_the_closure_libsycl_is_provided(audited, system, tmp_path):
    cache, a = audited
    closure = native.audit_wheels([], [_closure_dist("sycl9")], cache, tmp_path / "deps", tmp_path / "log",
                                  read_deps=False)
    report = _check([a["kernels"], *closure], native.Providers("2026.1.0", {}, system.system))
    need = report.need("libsycl.so.9")
    assert need.verdict == "provided" and not need.fatal
    assert need.source == "provided by the closure's intel-sycl-rt 2026.2.0"
    assert report.stamps == ()  # compiled by the captured oneAPI's 2026.1
    assert "libsycl.so.9" not in {n.soname for n in report.errors}


def test_toolchain_build_of_the_released_kernels_with_sycl_2025_then_2026(tmp_path):
    """`toolchain build` of a recipe pinning the released kernels and intel-sycl-rt as prebuilt components, the
    closure resolved from PyPI (its wheels known by their file lists, read by range requests from PyPI's file
    host): with 2025.3.3 it fails in at most 10 lines naming libsycl.so.9, libtorch_xpu.so and libc10_xpu.so
    missing and libze_loader.so.1 expected from the run host; with 2026.2.0 libsycl.so.9 is provided."""
    from tests.spine_helpers import Cli, isolated_env
    from tests.support.pypi_wheels import INTEL_SYCL_RT_2025, INTEL_SYCL_RT_2026, VLLM_XPU_KERNELS, toolchain_cache

    for name in PINS_USED:
        wheel(name)
    cli = Cli(tmp_path, isolated_env(tmp_path))
    recipe = tmp_path / "recipes" / "kernels.toml"
    recipe.parent.mkdir()
    outs = {}
    for pin in (INTEL_SYCL_RT_2025, INTEL_SYCL_RT_2026):
        recipe.write_text(textwrap.dedent(f"""\
            [toolchain]
            setvars = ""
            [target]
            python = "{sys.executable}"
            [resolve]
            indexes = ["https://pypi.org/simple"]
            [components.vllm-xpu-kernels]
            prebuilt = "{VLLM_XPU_KERNELS.requirement}"
            [components.intel-sycl-rt]
            prebuilt = "{pin.requirement}"
            """))
        out = tmp_path / pin.requirement.replace("==", "-")
        r = cli("build", "--recipe", recipe, "--out", out, "--cache-dir", toolchain_cache(), "--json",
                env={"PIP_NO_INDEX": ""})
        assert r.returncode == 1 and r.json()["kind"] == "NativeABIError", str(r)
        outs[pin] = r.json()
        assert not (out / "wheels" / "deps").exists()  # nothing of the closure downloaded
    lines = outs[INTEL_SYCL_RT_2025]["error"].splitlines()
    assert len(lines) <= 11, lines
    assert any(x.startswith("  - libsycl.so.9: missing;") and "intel-sycl-rt 2026.x" in x for x in lines), lines
    for so in ("libtorch_xpu.so", "libc10_xpu.so"):
        assert any(x.startswith(f"  - {so}: missing;") and "a torch XPU build" in x for x in lines), lines
    assert any("expected from the run host" in x and "libze_loader.so.1" in x for x in lines), lines
    assert '[components.intel-sycl-rt] prebuilt = "intel-sycl-rt==2026.2.0"' in outs[INTEL_SYCL_RT_2025]["hint"]
    lines = outs[INTEL_SYCL_RT_2026]["error"].splitlines()
    assert not any("libsycl.so.9" in x for x in lines) and any("libtorch_xpu.so: missing" in x for x in lines), lines


PINS_USED = ("kernels", "sycl8", "sycl9")


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves one file with HTTP range requests (as PyPI's file host does), counting the bytes it sends."""

    path_served: Path
    sent = 0

    def do_GET(self):
        data_size = self.path_served.stat().st_size
        want = self.headers.get("Range", "")
        m = re.match(r"bytes=(\d*)-(\d*)$", want)
        if m is None:
            start, end, code = 0, data_size - 1, 200
        elif not m.group(1):
            start, end, code = max(0, data_size - int(m.group(2))), data_size - 1, 206
        else:
            start, end, code = int(m.group(1)), int(m.group(2) or data_size - 1), 206
        with open(self.path_served, "rb") as f:
            f.seek(start)
            body = f.read(end - start + 1)
        self.send_response(code)
        if code == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{data_size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        type(self).sent += len(body)

    def log_message(self, *args):
        pass


def test_the_closures_file_list_is_read_by_range_requests_and_cached(tmp_path):
    """intel-sycl-rt 2025.3.3 (114 MB) served on 127.0.0.1 with ranges: its file list costs under 1 MB, is kept
    by sha256 and read from there next time (no request at all)."""
    w = wheel("sycl8")

    class handler(_RangeHandler):
        path_served = w
        sent = 0

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{w.name}"
        dist = LockedDist(name="intel-sycl-rt", version="2025.3.3", file=w.name, url=url, sha256=sha256_file(w))
        got = wheelfiles.libraries_of(dist, tmp_path / "cache", tmp_path / "deps", tmp_path / "log")
        with zipfile.ZipFile(w) as z:
            assert got == tuple(sorted(n for n in z.namelist() if wheelfiles.SO_NAME.search(n)))
        assert any(n.endswith("/libsycl.so.8") for n in got)
        assert 0 < handler.sent < 1_000_000 < w.stat().st_size, handler.sent
        sent = handler.sent
        assert wheelfiles.libraries_of(dist, tmp_path / "cache", tmp_path / "deps", tmp_path / "log") == got
        assert handler.sent == sent  # from the cache
        assert not (tmp_path / "deps").exists()
    finally:
        server.shutdown()


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
    need = _check([a["kernels"], a["sycl8"]], providers).need("libsycl.so.9")
    assert need.verdict == "provided" and need.source == f"provided by setvars' library path ({lib})"


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
    return write_wheel(folder, "standin-sycl-rt", "9.0", {f"standin_sycl_rt-9.0.data/data/lib/{soname}":
                                                          b"stand-in, not a library\n", "standin_sycl_rt/__init__.py": b""})


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
    assert _check([a["kernels"]], providers).need("libsycl.so.9").verdict == "provided"
    unread = native.target_providers(runtime, python, [], "")  # the stack not read: libsycl.so.9 is missing
    assert providers.system == unread.system and unread.installed == {}
    assert _check([a["kernels"]], unread).need("libsycl.so.9").fatal
    other = tmp_path / "other"
    other.mkdir()
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
                                "--no-index", "--force-reinstall", str(_runtime_wheel(other, "libsycl.so.8"))],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    need = _check([a["kernels"]], native.target_providers(runtime, python, [], "", installed=True)).need("libsycl.so.9")
    assert need.fatal and "the target's installed standin-sycl-rt has libsycl.so.8" in need.line()


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
    dist = LockedDist(name="intel-sycl-rt", version=w.name.split("-")[1], file=w.name, url=w.as_uri(),
                      sha256=a["sycl8"].sha256)
    (got,) = native.audit_wheels([], [dist], cache, tmp_path / "deps", tmp_path / "fetch.log")
    assert got.objects == a["sycl8"].objects and got.role == "dependency"
    assert not (tmp_path / "deps").exists()  # nothing fetched: the file was at hand


def test_a_pure_python_component_over_the_kernels_builds_and_lock_audit_reads_the_closure(ws, audited, tmp_path):
    """A pure-Python component requiring the real kernels wheel (find-links), built with a setvars whose library
    path holds oneAPI 2025's libsycl.so.8: the build passes (the closure is known by its file list; the kernels
    are not a component: nothing of theirs is loaded by what the recipe builds). `toolchain lock --audit` reads the
    closure's own objects: libsycl.so.9 is a warning listed once, libze_loader.so.1 is recorded as expected from
    the run host."""
    cache, _ = audited
    lib = _oneapi_lib("sycl8", "libsycl.so.8", tmp_path / "oneapi-2025" / "lib")
    setvars = tmp_path / "oneapi-2025" / "setvars.sh"
    setvars.write_text(f"# TEST setvars (not oneAPI): its library path holds oneAPI 2025's libsycl.so.8\n"
                       f"export CMPLR_ROOT={lib.parent}\nexport LD_LIBRARY_PATH={lib}\n")
    repo = GitRepo.create(tmp_path / "needs-kernels")
    repo.commit("a package that needs the kernels", {
        "pyproject.toml": setuptools_project("needs-kernels", dependencies=["vllm-xpu-kernels==0.1.16.2"])})
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
    assert r.returncode == 0, str(r)
    kernels = next(a for a in ws.lock()["native"] if a["wheel"] == wheel("kernels").name)
    assert not kernels["objects"] and "vllm_xpu_kernels/_xpu_C.abi3.so" in kernels["libraries"]
    assert not (ws.root / "out" / "wheels" / "deps").exists()  # nothing fetched to read a name
    r = ws.cli("lock", "--lock", ws.root / "out", "--audit", "--cache-dir", ws.cache, "--json")
    assert r.returncode == 0, str(r)
    assert r.output.count("libsycl.so.9: missing; needed by 12 files in vllm-xpu-kernels 0.1.16.2") == 1, r.output
    kernels = next(a for a in ws.lock()["native"] if a["wheel"] == wheel("kernels").name)
    assert "libze_loader.so.1" in kernels["host-provides"] and kernels["objects"]


def test_the_demo_lock_records_the_audit_and_the_box(demo_build):
    lock = demo_build.lock()
    wheels = {a["wheel"] for a in lock["native"]}
    assert {c["wheel"]["file"] for c in lock["components"]} <= wheels
    assert {d["file"] for d in lock["dependencies"] if d["file"].endswith(".whl")} <= wheels
    kernels = next(a for a in lock["native"] if a["wheel"].startswith("demo_kernels-"))
    (obj,) = kernels["objects"]  # the demo's C extension, compiled by the host's gcc (the stand-in has no icpx)
    assert obj["file"].startswith("demo_kernels/_C.") and obj["compilers"][0].startswith("GCC: ")
    assert kernels["role"] == "built" and kernels["sha256"] in {c["wheel"]["sha256"] for c in lock["components"]}
    record = lock_and_record(demo_build.out)  # the box it was built on: the build record's, not the lock's
    assert "host" not in lock and record["host"]["kernel"] == Path("/proc/sys/kernel/osrelease").read_text().strip()


def test_provided_by_oneapi_at_build_and_missing_where_smoke_serves_without_it(ws, tmp_path):
    """A wheel holding a real extension module linked against oneAPI 2026's libsycl.so.9: the build passes
    (setvars' library path provides it), smoke stops before serving (it serves without oneAPI and the closure has no
    intel-sycl-rt), naming the soname, the file and who ships it."""
    from tests.smoke.smoke_helpers import fault_cmd

    lib = _oneapi_lib("sycl9", "libsycl.so.9", tmp_path / "oneapi-2026" / "lib")
    setvars = lib.parent / "setvars.sh"
    setvars.write_text(f"# TEST setvars (not oneAPI): its library path holds oneAPI 2026's libsycl.so.9\n"
                       f"export CMPLR_ROOT={lib.parent}\nexport LD_LIBRARY_PATH={lib}\n")
    repo = GitRepo.create(tmp_path / "needy")
    (repo.path / "needy").mkdir()
    (repo.path / "n.c").write_text("int needy(void) { return 7; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", "needy/_needy.abi3.so", "n.c", f"-L{lib}", "-Wl,--no-as-needed",
                    "-l:libsycl.so.9"], cwd=repo.path, check=True, timeout=120)
    repo.commit("a package shipping a library that needs libsycl.so.9", {
        "needy/__init__.py": "",
        "pyproject.toml": setuptools_project("needy", setuptools='packages = ["needy"]\n'
                                                                '[tool.setuptools.package-data]\nneedy = ["*.so"]\n')})
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
    assert audit["objects"] == [{"file": "needy/_needy.abi3.so", "needed": ["libsycl.so.9", "libc.so.6"],
                                 "compilers": audit["objects"][0]["compilers"]}]
    assert audit["host-provides"] == ["libc.so.6"]
    r = ws.cli("smoke", "--lock", ws.root / "out", "--skip-device-check", "--serve-cmd", fault_cmd("healthy"),
               "--cases", "math", "--out", ws.root / "smoke", "--cache-dir", tmp_path / "smoke-cache", "--json")
    assert r.returncode == 1, str(r)
    sha = ws.lock()["components"][0]["wheel"]["sha256"]  # its audit kept in the --cache-dir given (not the default)
    assert (tmp_path / "smoke-cache" / "native" / f"{sha}.json").is_file(), list((tmp_path / "smoke-cache").rglob("*"))
    err = r.json()
    assert err["kind"] == "NativeABIError", str(r)
    line = next(x for x in err["error"].splitlines() if "libsycl.so.9: missing; needed by 1 file in needy 1.0" in x)
    assert "shipped by intel-sycl-rt 2026.x" in line
    report = json.loads((ws.root / "smoke" / "report.json").read_text())
    assert report["verdict"] == "fail" and "served" not in report  # stopped before serving


def test_a_closures_file_lists_are_read_several_at_once_in_order(tmp_path):
    """Wheels served on 127.0.0.1 with ranges, each request answered only once another one is in flight (or
    after 5 s): read one after the other, none would ever be; each wheel's own libraries come back, in order."""
    wheels = []
    for i in range(6):
        path = tmp_path / "served" / f"pkg{i}-1.0-py3-none-any.whl"
        path.parent.mkdir(exist_ok=True)
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(f"pkg{i}/lib/libpkg{i}.so.1", b"\0")
            z.writestr(f"pkg{i}/__init__.py", "")
        wheels.append(path)
    flight = threading.Condition()
    state = {"now": 0, "most": 0}

    class handler(_RangeHandler):
        sent = 0

        def do_GET(self):
            self.path_served = tmp_path / "served" / self.path.lstrip("/")
            with flight:
                state["now"] += 1
                state["most"] = max(state["most"], state["now"])
                flight.notify_all()
                flight.wait_for(lambda: state["now"] >= 2, 5)
            try:
                super().do_GET()
            finally:
                with flight:
                    state["now"] -= 1

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        dists = [LockedDist(name=f"pkg{i}", version="1.0", file=w.name, url=f"{base}/{w.name}",
                            sha256=sha256_file(w)) for i, w in enumerate(wheels)]
        got = wheelfiles.libraries_of_all(dists, tmp_path / "cache", tmp_path / "deps", tmp_path / "log")
    finally:
        server.shutdown()
    assert got == [(f"pkg{i}/lib/libpkg{i}.so.1",) for i in range(6)]
    assert state["most"] >= 2
