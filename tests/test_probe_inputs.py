"""The probes report every input they read (issue 39): the target interpreter (sys.path, .pth files, the
metadata of each distribution whose version it read), setvars (every file sourced while it runs), and the
memo re-checks each of them. The warm-against-cold journeys are tests/journeys/test_probe_inputs.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from toolchain import scripts
from toolchain.core.probe_memo import remembered
from toolchain.target.oneapi import MARK


def probe(tmp_path: Path, *names: str, env: dict[str, str] | None = None) -> dict:
    venv = tmp_path / "venv"
    if not venv.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    r = subprocess.run([str(venv / "bin" / "python"), str(scripts.path("interpreter.py")), *names],
                       env={**full, **(env or {})}, capture_output=True, text=True, check=True, timeout=60)
    return json.loads(r.stdout.strip().splitlines()[-1])


def site_of(tmp_path: Path) -> Path:
    (site,) = (tmp_path / "venv" / "lib").glob("python*/site-packages")
    return site


def dist(folder: Path, name: str, version: str, kind: str = "dist-info") -> Path:
    info = folder / f"{name.replace('-', '_')}-{version}.{kind}"
    info.mkdir(parents=True)
    (info / ("METADATA" if kind == "dist-info" else "PKG-INFO")).write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return info


def test_the_interpreter_probe_reports_sys_path_its_pth_files_and_the_metadata_it_read(tmp_path):
    probe(tmp_path)
    site = site_of(tmp_path)
    develop = tmp_path / "src"
    egg = dist(develop, "torch", "2.9.0", "egg-info")
    (develop / "torch").mkdir()
    (develop / "torch" / "version.py").write_text("__version__ = '2.9.0'\nxpu = '20250301'\n")
    (site / "__editable__.torch-2.9.0.pth").write_text(f"{develop}\n")
    other = tmp_path / "pythonpath"
    built_against = dist(other, "standin-torch", "2.14.0+xpu")

    found = probe(tmp_path, "standin-torch", "absent-dist", env={"PYTHONPATH": str(other)})
    assert found["torch_version"] == "2.9.0" and found["torch_xpu"] == "20250301"
    assert found["dists"] == {"standin-torch": "2.14.0+xpu", "absent-dist": None}
    inputs = set(found["inputs"])
    assert {str(site), str(site / "__editable__.torch-2.9.0.pth"), str(develop), str(other)} <= inputs
    assert {str(egg / "PKG-INFO"), str(develop / "torch" / "version.py"), str(built_against / "METADATA")} <= inputs
    assert str(tmp_path / "venv" / "pyvenv.cfg") in inputs
    assert "executable" in found and "watch" not in found


def test_a_remembered_answer_is_computed_again_when_any_recorded_input_changes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("1")
    calls = []

    def compute() -> tuple[str, list[str]]:
        calls.append(1)
        return a.read_text() + (b.read_text() if b.exists() else ""), [str(a), str(b)]

    memo = tmp_path / "memo"
    assert remembered(memo, "k", {"id": 1}, compute) == "1"
    assert remembered(memo, "k", {"id": 1}, compute) == "1" and len(calls) == 1
    b.write_text("2")  # an input recorded as absent, created
    assert remembered(memo, "k", {"id": 1}, compute) == "12" and len(calls) == 2
    st = a.stat()
    a.write_text("3")  # rewritten in place, its mtime put back: the ctime tells
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert remembered(memo, "k", {"id": 1}, compute) == "32" and len(calls) == 3
    (saved,) = memo.glob("k-*.json")
    assert sorted(json.loads(saved.read_text())["inputs"]) == [str(a), str(b)]


def run_wrapper(tmp_path: Path, setvars: Path, *args: str, path_dir: Path | None = None) -> tuple[list[str], str]:
    env = {**os.environ, "PATH": f"{path_dir}:{os.environ['PATH']}" if path_dir else os.environ["PATH"]}
    r = subprocess.run(["bash", "-c", scripts.path("setvars.bash").read_text(), "toolchain-setvars", str(setvars),
                        *args], cwd=tmp_path, env=env, capture_output=True, text=True, check=True, timeout=60)
    parts = r.stdout.split(MARK)
    assert len(parts) == 3, r.stdout
    return [p for p in parts[1].split("\0") if p], r.stderr


def test_setvars_reports_every_file_it_sources_and_a_sourced_file_gets_its_callers_arguments(tmp_path):
    root = tmp_path / "oneapi"
    (root / "compiler" / "env").mkdir(parents=True)
    (root / "ccl" / "env").mkdir(parents=True)
    (root / "compiler" / "env" / "vars.sh").write_text('echo "compiler vars: $#: $*" >&2\n')
    (root / "ccl" / "env" / "vars.sh").write_text('echo "ccl vars: $#: $*" >&2\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "on-path.sh").write_text("export FROM_PATH=1\n")
    setvars = root / "setvars.sh"
    setvars.write_text('cd "$(dirname "${BASH_SOURCE[0]}")"\n'
                       '. compiler/env/vars.sh\n'            # relative: to the working folder
                       'source ./ccl/env/vars.sh one two\n'  # with its own arguments
                       'source on-path.sh\n'                 # no slash: found on PATH, as bash does
                       'export DONE=1\n')
    sourced, stderr = run_wrapper(tmp_path, setvars, "--force", "--ccl-configuration=cpu_gpu_dpcpp",
                                  path_dir=bin_dir)
    assert sourced == [str(root / "compiler/env/vars.sh"), f"{root}/./ccl/env/vars.sh",
                       str(bin_dir / "on-path.sh")]
    assert "compiler vars: 2: --force --ccl-configuration=cpu_gpu_dpcpp" in stderr  # the caller's, as the builtin
    assert "ccl vars: 2: one two" in stderr


def test_the_demo_standin_sources_a_second_file_and_says_it_is_a_standin():
    standin = Path(scripts.FOLDER).parent / "demo_src" / "oneapi-standin"
    sourced, _ = run_wrapper(standin, standin / "setvars.sh", "--force")
    assert sourced == [str(standin / "compiler" / "env" / "vars.sh")]
    assert "STAND-IN" in (standin / "compiler" / "env" / "vars.sh").read_text()


def test_a_remembered_closure_is_a_miss_once_a_local_find_links_file_it_read_changes(tmp_path):
    from toolchain.core.probe_memo import stat_key
    from toolchain.recipe.model import ResolveSpec
    from toolchain.resolve.closure import Closure
    from toolchain.resolve.closure_memo import ClosureMemo, local_inputs

    links = tmp_path / "wheelhouse"
    links.mkdir()
    wheel = links / "dep-1.0-py3-none-any.whl"
    wheel.write_bytes(b"one")
    spec = ResolveSpec(indexes=(), find_links=(str(links), "https://example.invalid/links/"))
    assert local_inputs(spec) == [str(links), str(wheel)]
    memo = ClosureMemo(tmp_path / "resolve")
    memo.put("k", Closure(), {p: stat_key(p) for p in local_inputs(spec)})
    assert memo.get("k") == Closure()
    st = wheel.stat()
    wheel.write_bytes(b"two")  # rewritten in place under its name, its mtime put back
    os.utime(wheel, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert memo.get("k") is None
