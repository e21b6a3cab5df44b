"""Issue 47: the probe inputs a warm build still missed. Each case remembers a probe (the target interpreter's,
or setvars'), changes what the probe reads the way a user does (a real `pip install -e`, a real sitecustomize,
a folder a .pth names created later, a namespace portion gaining an `__init__.py`, another working folder for a
relative PYTHONPATH, a real `pip install` racing the probe, a file setvars reads with `$(<file)` or `command .`),
then asks again: the remembered answer (warm) must be what a probe without a memo (cold) answers in that state.
The interpreter is a real venv's, setvars a stand-in shell script (labelled so in its text)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.journeys.test_warm_checks import rewrite_in_place
from toolchain.build.plan import capture_toolchain, installed_versions, probe_target
from toolchain.recipe.load import TargetSpec, load_recipe
from toolchain.target import shelltrace
from toolchain.target.facts import SYS_PATH_VARS
from toolchain.target.host import HostRuntime

NAMES = ("torch", "standin-torch")


@pytest.fixture(autouse=True)
def plain_env(monkeypatch):
    """No inherited variable shapes the target's sys.path (the suite's PYTHONPATH, a venv)."""
    for k in (*SYS_PATH_VARS, "PYTHONSTARTUP", "PYTHONDONTWRITEBYTECODE"):
        if k != "HOME":
            monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")


def venv(tmp_path: Path) -> tuple[Path, Path]:
    """A real venv (no pip of its own) and its site-packages."""
    target = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True, timeout=120)
    (site,) = (target / "lib").glob("python*/site-packages")
    return target / "bin" / "python", site


def dist_info(folder: Path, name: str, version: str) -> None:
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def answers(python: Path, memo: Path) -> tuple[tuple[object, ...], tuple[object, ...], int]:
    """(the remembered answer, the answer of a probe without memo, how many probes the remembered one ran)."""
    runs: list[int] = []

    class Counting(HostRuntime):
        def probe_inputs(self):
            runs.append(1)
            return super().probe_inputs()

    rt = Counting(TargetSpec(python=str(python)))
    ident = rt.identity()
    assert ident is not None
    info = probe_target(rt, memo, ident)
    warm = (info.torch_version, info.torch_xpu, installed_versions(rt, str(python), NAMES, {}, memo, ident))
    cold_rt = HostRuntime(TargetSpec(python=str(python)))
    cold_info = cold_rt.probe()
    cold = (cold_info.torch_version, cold_info.torch_xpu, installed_versions(cold_rt, str(python), NAMES, {}, None, None))
    return warm, cold, len(runs)


def warm_is_cold(python: Path, memo: Path) -> tuple[object, ...]:
    warm, cold, _ = answers(python, memo)
    assert warm == cold
    return warm


def served(python: Path, memo: Path) -> tuple[object, ...]:
    """Asked again with nothing changed: the memo answers (no probe runs)."""
    warm, cold, runs = answers(python, memo)
    assert warm == cold and runs == 0
    return warm


def torch_package(folder: Path, xpu: str | None, *, init: bool = True) -> Path:
    pkg = folder / "torch"
    pkg.mkdir(parents=True, exist_ok=True)
    if init:
        (pkg / "__init__.py").write_text("")
    if xpu is not None:
        (pkg / "version.py").write_text(f"__version__ = '2.9.0'\nxpu = '{xpu}'\n")
    return pkg


def test_an_edited_sitecustomize_is_an_input(tmp_path: Path):
    python, site = venv(tmp_path)
    one, two = tmp_path / "one", tmp_path / "two"
    torch_package(one, "11111111")
    dist_info(one, "torch", "2.9.0")
    torch_package(two, "22222222")
    dist_info(two, "torch", "2.9.1")
    custom = site / "sitecustomize.py"
    custom.write_text(f"import sys\nsys.path.insert(0, {str(one)!r})\n")
    memo = tmp_path / "memo"
    assert warm_is_cold(python, memo)[:2] == ("2.9.0", "11111111")
    assert served(python, memo)[:2] == ("2.9.0", "11111111")
    rewrite_in_place(custom, b"/one'", b"/two'")  # the same size, its mtime put back: its content read
    assert warm_is_cold(python, memo)[:2] == ("2.9.1", "22222222")


def test_a_usercustomize_made_later_then_edited_is_an_input(tmp_path: Path, monkeypatch):
    python, _ = venv(tmp_path)
    cfg = python.parent.parent / "pyvenv.cfg"  # a venv that sees the user site (as one made with --system-site-packages)
    cfg.write_text(cfg.read_text().replace("include-system-site-packages = false", "include-system-site-packages = true"))
    monkeypatch.setenv("PYTHONUSERBASE", str(tmp_path / "home" / ".local"))
    memo = tmp_path / "memo"
    for name, xpu in (("one", "31111111"), ("two", "32222222")):
        torch_package(tmp_path / name, xpu)
        dist_info(tmp_path / name, "torch", f"2.9.3{xpu[1]}")
    before = warm_is_cold(python, memo)
    assert before[1] not in ("31111111", "32222222")
    user_site = Path(subprocess.run([str(python), "-c", "import site; print(site.getusersitepackages())"],
                                    check=True, capture_output=True, text=True, timeout=60).stdout.strip())
    user_site.mkdir(parents=True)
    custom = user_site / "usercustomize.py"
    custom.write_text(f"import sys\nsys.path.insert(0, {str(tmp_path / 'one')!r})\n")
    assert warm_is_cold(python, memo)[:2] == ("2.9.31", "31111111")
    assert served(python, memo)[:2] == ("2.9.31", "31111111")
    rewrite_in_place(custom, b"/one'", b"/two'")  # the same size, its mtime put back: its content read
    assert warm_is_cold(python, memo)[:2] == ("2.9.32", "32222222")


def test_a_folder_a_pth_names_before_it_exists_is_an_input(tmp_path: Path):
    python, site = venv(tmp_path)
    later = tmp_path / "later"
    (site / "later.pth").write_text(f"{later}\n")
    memo = tmp_path / "memo"
    assert warm_is_cold(python, memo)[0] == ""
    assert served(python, memo)[0] == ""
    torch_package(later, "44444444")  # the folder the .pth names appears, with torch in it
    dist_info(later, "torch", "2.9.4")
    assert warm_is_cold(python, memo)[:2] == ("2.9.4", "44444444")


def test_a_setuptools_editable_finders_mapping_is_an_input(tmp_path: Path):
    """A real `pip install -e` of a project whose package folder is not where its name says (package_dir): setuptools
    installs a finder that maps `torch` to that folder. Its __init__.py removed, then put back."""
    python, _ = venv(tmp_path)
    project = tmp_path / "torch-src"
    pkg = torch_package(project / "impl" / "torch_impl", "55555555")
    (project / "setup.py").write_text("from setuptools import setup\n"
                                      "setup(name='torch', version='2.9.5', packages=['torch'],\n"
                                      "      package_dir={'torch': 'impl/torch_impl/torch'})\n")
    # `pip install -e` in two real steps (the venv has no setuptools to build with): setuptools' PEP 660 hook
    # makes the editable wheel, pip installs it into the venv
    subprocess.run([sys.executable, "-c", "from setuptools import build_meta; build_meta.build_editable('../dist')"],
                   cwd=project, check=True, timeout=300, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("torch-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", "--no-deps",
                    str(wheel)], check=True, timeout=300, capture_output=True)
    site = python.parent.parent
    assert list(site.rglob("__editable___torch_*finder.py")), "setuptools did not install a mapping finder"
    memo = tmp_path / "memo"
    assert warm_is_cold(python, memo)[:2] == ("2.9.5", "55555555")
    assert served(python, memo)[:2] == ("2.9.5", "55555555")
    init = pkg / "__init__.py"
    init.unlink()  # the mapped folder has no __init__.py: the finder finds no torch
    assert warm_is_cold(python, memo)[0] == ""
    init.write_text("")
    assert warm_is_cold(python, memo)[:2] == ("2.9.5", "55555555")


def test_a_relative_pythonpath_is_resolved_against_the_current_folder(tmp_path: Path, monkeypatch):
    python, _ = venv(tmp_path)
    for name, xpu in (("a", "66666666"), ("b", "77777777")):
        torch_package(tmp_path / name / "deps", xpu)
        dist_info(tmp_path / name / "deps", "torch", f"2.9.{xpu[0]}")
    monkeypatch.setenv("PYTHONPATH", "deps")
    memo = tmp_path / "memo"
    monkeypatch.chdir(tmp_path / "a")
    assert warm_is_cold(python, memo)[:2] == ("2.9.6", "66666666")
    monkeypatch.chdir(tmp_path / "b")  # the same PYTHONPATH, another folder
    assert warm_is_cold(python, memo)[:2] == ("2.9.7", "77777777")
    monkeypatch.chdir(tmp_path / "a")
    assert served(python, memo)[:2] == ("2.9.6", "66666666")


def test_a_namespace_portion_that_gains_an_init_is_an_input(tmp_path: Path, monkeypatch):
    python, _ = venv(tmp_path)
    first, second = tmp_path / "p1", tmp_path / "p2"
    torch_package(first, None, init=False)  # a portion without version.py
    torch_package(second, "88888888", init=False)
    dist_info(second, "torch", "2.9.8")
    monkeypatch.setenv("PYTHONPATH", f"{first}{os.pathsep}{second}")
    memo = tmp_path / "memo"
    assert warm_is_cold(python, memo)[:2] == ("2.9.8", "88888888")  # torch is a namespace of both portions
    assert served(python, memo)[:2] == ("2.9.8", "88888888")
    (first / "torch" / "__init__.py").write_text("")  # now a regular package: p1's alone, no version.py in it
    assert warm_is_cold(python, memo)[:2] == ("2.9.8", "")


def test_a_pip_install_racing_the_probe_is_seen_by_the_next_one(tmp_path: Path):
    """A real `pip install` of torch 2.10.0 over 2.9.9 lands after the probe read torch's metadata and before it
    ended (a sitecustomize holds the probe at its next folder listing until the install is done: the race made
    certain). The probe's
    answer is the old version; the one after it must answer the new one, not the memo."""
    python, site = venv(tmp_path)
    wheels = tmp_path / "wheels"
    for version in ("2.9.9", "2.10.0"):
        src = tmp_path / f"src-{version}"
        torch_package(src, version.replace(".", ""))
        (src / "setup.py").write_text(f"from setuptools import setup\nsetup(name='torch', version='{version}', "
                                      "packages=['torch'])\n")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-index", "--no-build-isolation", "--no-deps",
                        "-w", str(wheels), str(src)], check=True, timeout=300, capture_output=True)

    def pip_install(version: str) -> None:
        (wheel,) = wheels.glob(f"torch-{version}-*.whl")
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index",
                        "--no-deps", "--force-reinstall", str(wheel)], check=True, timeout=300, capture_output=True)

    pip_install("2.9.9")
    held, release = tmp_path / "held", tmp_path / "release"
    (site / "sitecustomize.py").write_text(  # (holds the first probe that read torch's METADATA, once)
        "import os, sys, time\n"
        f"HELD, RELEASE = {str(held)!r}, {str(release)!r}\n"
        "seen = []\n"
        "def hold(event, args):\n"
        "    if event == 'open' and isinstance(args[0], str) and args[0].endswith('METADATA') and 'torch-' in args[0]:\n"
        "        seen.append(1)\n"
        "    elif event == 'os.listdir' and seen and not os.path.exists(HELD):\n"
        "        open(HELD, 'w').close()\n"
        "        while not os.path.exists(RELEASE):\n"
        "            time.sleep(0.05)\n"
        "sys.addaudithook(hold)\n")
    memo = tmp_path / "memo"
    rt = HostRuntime(TargetSpec(python=str(python)))
    ident = rt.identity()
    got: list[object] = []
    probe = threading.Thread(target=lambda: got.append(probe_target(rt, memo, ident).torch_version))
    probe.start()
    deadline = time.monotonic() + 120
    while not held.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held.exists(), "the probe never reached the point the test holds it at"
    pip_install("2.10.0")  # while the probe is held: after it read 2.9.9's metadata
    release.touch()
    probe.join(120)
    assert got == ["2.9.9"]  # what it read before the install
    after = probe_target(rt, memo, ident).torch_version
    assert after == HostRuntime(TargetSpec(python=str(python))).probe().torch_version == "2.10.0"
    assert probe_target(rt, memo, ident).torch_version == "2.10.0"  # (and now remembered)


# ---- setvars ------------------------------------------------------------------------------------------------

def setvars_recipe(tmp_path: Path, body: str) -> tuple[object, Path]:
    """A recipe (the demo's, extended) whose setvars is a STAND-IN script with `body`, sourcing the demo's
    stand-in at the end (for its compiler)."""
    from toolchain.recipe.load import shipped_recipes_dir

    standin = (shipped_recipes_dir() / "../../demo_src/oneapi-standin/setvars.sh").resolve()
    oneapi = tmp_path / "oneapi"
    oneapi.mkdir()
    setvars = oneapi / "setvars.sh"
    setvars.write_text(f"# STAND-IN for oneAPI setvars.sh (a test's)\n{body}\nsource {standin} --force\n")
    recipe = tmp_path / "recipes" / "mine.toml"
    recipe.parent.mkdir()
    recipe.write_text(f'extends = "demo"\n\n[toolchain]\nsetvars = "{setvars}"\nsetvars-args = []\n')
    return load_recipe(str(recipe)), oneapi


def captured(recipe: object, memo: Path) -> tuple[dict[str, str | None], dict[str, str | None]]:
    rt = HostRuntime(recipe.target)  # type: ignore[attr-defined]
    warm = capture_toolchain(recipe, rt, memo, rt.identity()).as_dict()  # type: ignore[arg-type]
    cold = capture_toolchain(recipe, rt, None, None).as_dict()  # type: ignore[arg-type]
    return warm, cold


@pytest.mark.parametrize("read", ["$(<file)", "command .", "cat"])
def test_a_file_setvars_reads_without_source_is_an_input(tmp_path: Path, read: str, monkeypatch):
    if shelltrace.tracer() is None:
        pytest.skip("needs strace (tests/support/ci_setup.sh installs it)")
    files = tmp_path / "etc"
    files.mkdir()
    (files / "level").write_text("export LEVEL=1111\n" if read == "command ." else "1111\n")
    body = {"$(<file)": f'export LEVEL="$(<{files}/level)"',
            "command .": f"command . {files}/level",
            "cat": f'export LEVEL="$(cat {files}/level)"'}[read]
    recipe, _ = setvars_recipe(tmp_path, body)
    memo = tmp_path / "memo"
    warm, cold = captured(recipe, memo)
    assert warm == cold and warm["LEVEL"] == "1111"
    rewrite_in_place(files / "level", b"1111", b"2222")  # the same size, its mtime put back
    warm, cold = captured(recipe, memo)
    assert warm == cold and warm["LEVEL"] == "2222", read


def test_without_a_tracer_command_dot_is_still_seen_by_the_wrapper(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(shelltrace, "tracer", lambda: None)  # (strace absent, or not permitted to trace)
    files = tmp_path / "etc"
    files.mkdir()
    (files / "level").write_text("export LEVEL=1111\n")
    recipe, _ = setvars_recipe(tmp_path, f"command . {files}/level")
    memo = tmp_path / "memo"
    warm, cold = captured(recipe, memo)
    assert warm == cold and warm["LEVEL"] == "1111"
    rewrite_in_place(files / "level", b"1111", b"2222")
    warm, cold = captured(recipe, memo)
    assert warm == cold and warm["LEVEL"] == "2222"


def test_a_file_changed_while_setvars_is_sourced_is_probed_again(tmp_path: Path):
    """A real process rewrites a file setvars sources (in place: its size and mtime put back) after the shell
    read it and before the sourcing ended (setvars holds there until the rewrite is done: the race made
    certain). That run's answer is the old text; the next one must answer the new text, not a memo recorded
    with the rewritten file's stat (its ctime falls after sourcing began: racily clean, as git says)."""
    files = tmp_path / "etc"
    files.mkdir()
    level, held, release = files / "level", tmp_path / "held", tmp_path / "release"
    level.write_text("export LEVEL=1111\n")
    os.utime(level, ns=(1_000_000_000, 1_000_000_000))
    body = (f"source {level}\n"
            f"if [ ! -e {held} ]; then : > {held}; while [ ! -e {release} ]; do sleep 0.05; done; fi")
    recipe, _ = setvars_recipe(tmp_path, body)
    time.sleep(0.2)  # (what the test made is older than the racy margin: only the rewrite is racy)
    rewriter = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "level, held, release = map(Path, sys.argv[1:])\n"
        "end = time.monotonic() + 120\n"
        "while not held.exists() and time.monotonic() < end:\n"
        "    time.sleep(0.02)\n"
        "st = level.stat()\n"
        "with open(level, 'r+b') as f:\n"
        "    f.write(level.read_bytes().replace(b'1111', b'2222'))\n"
        "os.utime(level, ns=(st.st_atime_ns, st.st_mtime_ns))\n"
        "release.touch()\n"), str(level), str(held), str(release)])
    memo = tmp_path / "memo"
    rt = HostRuntime(recipe.target)  # type: ignore[attr-defined]
    try:
        first = capture_toolchain(recipe, rt, memo, rt.identity()).as_dict()  # type: ignore[arg-type]
    finally:
        assert rewriter.wait(timeout=150) == 0
    assert first["LEVEL"] == "1111"  # (read before the rewrite)
    assert level.stat().st_size == len("export LEVEL=1111\n") and level.stat().st_mtime_ns == 1_000_000_000
    warm, cold = captured(recipe, memo)
    assert warm == cold and warm["LEVEL"] == "2222"


def test_the_shell_trace_reads_opens_stats_and_execs_not_writes(tmp_path: Path):
    trace = "\n".join([
        '101 openat(AT_FDCWD, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3',
        '101 openat(AT_FDCWD, "rel/file", O_RDONLY) = -1 ENOENT (No such file or directory)',
        '101 openat(AT_FDCWD, "/tmp/out", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 4',
        '102 execve("/usr/bin/cat", ["cat", "x"], 0x7ffd /* 5 vars */) = 0',
        '102 newfstatat(AT_FDCWD, "/opt/absent", 0x7ffd, 0) = -1 ENOENT (No such file or directory)',
        f'102 newfstatat(AT_FDCWD, "{tmp_path}", {{st_mode=S_IFDIR|0755}}, 0) = 0',
        '102 openat(AT_FDCWD, "/proc/self/maps", O_RDONLY) = 3',
        '102 access("/opt/intel/oneapi/setvars.sh", R_OK) = 0',
        '102 +++ exited with 0 +++',
    ])
    assert shelltrace.paths_read(trace, "/work") == [
        "/etc/ld.so.cache", "/work/rel/file", "/usr/bin/cat", "/opt/absent", "/opt/intel/oneapi/setvars.sh"]
