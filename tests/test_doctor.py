"""`toolchain doctor` on fake host roots (TOOLCHAIN_HOST_ROOT): a B60 box, two B70s on an old kernel, a box
without a GPU, and a render node this user may not open; the target interpreter's torch as the probe sees it."""

from __future__ import annotations

import os
import subprocess
import textwrap

import pytest

from tests.spine_helpers import STANDIN_SETVARS, Result
from tests.support.fakehost import HOSTS, WITHOUT_DAC


def _doctor(ws, host: str, *args: str, env: dict[str, str] | None = None) -> dict:
    root = HOSTS[host].make(ws.root / f"host-{host}")
    r = ws.cli.ok("doctor", "--json", *args, env={"TOOLCHAIN_HOST_ROOT": str(root), **(env or {})})
    return r.json()


def _by_topic(doc: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for f in doc["findings"]:
        out.setdefault(f["topic"], []).append(f)
    return out


def test_b60_box_is_all_ok(ws):
    doc = _doctor(ws, "b60x1")
    f = _by_topic(doc)
    assert [g["status"] for g in f["GPU"]] == ["ok"]
    assert "BMG-G21" in f["GPU"][0]["value"]
    assert "0xe211" in f["GPU"][0]["value"]
    assert f["driver"][0] == {"topic": "driver", "status": "ok", "value": "card0: xe", "fix": ""}
    assert f["render access"][0]["status"] == "ok"
    assert "/dev/dri/renderD128" in f["render access"][0]["value"]
    assert f["kernel"][0]["value"] == "7.1.2-generic"
    assert f["kernel"][0]["status"] == "ok"
    assert f["GuC firmware"][0]["value"] == "70.44.1"
    assert f["HuC firmware"][0]["value"] == "8.2.10"
    assert f["Level Zero loader"][0]["value"] == "libze1 1.21.9-1"
    assert f["compute runtime"][0]["value"] == "libze-intel-gpu1 25.48.36300.8-1"
    assert f["oneAPI"][0]["status"] == "ok"
    assert "2026.1" in f["oneAPI"][0]["value"]
    assert "oneapi ccl 2021.17" in f["oneCCL"][0]["value"]
    assert f["memory"][0]["value"].startswith("64.0 GiB total, 32.0 GiB available")
    assert f["jobs: vllm-xpu-kernels"][0]["status"] == "ok"
    assert doc["host"]["gpus"] == ["card0 BMG-G21 (B60 class), device 0xe211 at 0000:03:00.0"]
    assert doc["host"]["drivers"] == ["xe"]
    assert doc["host"]["kernel"] == "7.1.2-generic"
    # this interpreter has no torch: said so, with the XPU index to install from
    assert f["torch"][0]["status"] == "missing"
    assert "download.pytorch.org/whl/xpu" in f["torch"][0]["fix"]


def test_two_b70_on_an_old_kernel_with_torch_that_sees_one(ws, tmp_path):
    # a test double of torch (NOT torch): an XPU build that sees one device, and the stack's versions
    site = tmp_path / "fake-torch-site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(textwrap.dedent("""\
        # TEST DOUBLE, not torch: what doctor's probe reads of an XPU build
        __version__ = "2.14.0+xpu"
        class version:
            xpu = "20260100"
        class xpu:
            is_available = staticmethod(lambda: True)
            device_count = staticmethod(lambda: 1)
            get_device_name = staticmethod(lambda i: "Intel(R) Graphics [0xe223]")
        """))
    for dist, version in (("vllm_xpu_kernels", "0.1.13.1"), ("vllm", "0.33.0+xpu")):
        info = site / f"{dist}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    recipe = ws.recipe("b70", textwrap.dedent(f"""\
        [toolchain]
        setvars = "{STANDIN_SETVARS}"
        [components.engine]
        url = "file:///nowhere"
        commit = "{'a' * 40}"
        [smoke]
        model = "m"
        device = "b70"
        tensor-parallel-size = 2
        """))
    doc = _doctor(ws, "b70x2", "--recipe", str(recipe), env={"PYTHONPATH": f"{site}:{ws.env['PYTHONPATH']}"})
    f = _by_topic(doc)
    assert [g["status"] for g in f["GPU"]] == ["ok", "ok"]
    assert all("BMG-G31" in g["value"] for g in f["GPU"])
    assert f["kernel"][0]["status"] == "warn"
    assert "#41663" in f["kernel"][0]["fix"]
    assert ">= 7.1" in f["kernel"][0]["fix"]
    assert f["torch"][0]["value"].startswith("2.14.0+xpu")
    assert f["torch XPU build"][0] == {"topic": "torch XPU build", "status": "ok",
                                       "value": "torch.version.xpu = 20260100", "fix": ""}
    assert f["torch.xpu"][0]["value"].startswith("available, 1 device(s)")
    assert f["torch.xpu devices"][0]["status"] == "warn"
    assert "1 of 2" in f["torch.xpu devices"][0]["value"]
    assert f["vllm-xpu-kernels"][0]["value"] == "0.1.13.1"
    assert "0.1.13.2" in f["vllm-xpu-kernels for B70 × 2"][0]["fix"]
    assert f["auto-round-lib"][0]["status"] == "warn"
    # the recipe's setvars is the labelled stand-in: captured, and never shown as oneAPI itself
    assert f["oneAPI"][0]["status"] == "warn"
    assert "STAND-IN" in f["oneAPI"][0]["value"]
    assert f["jobs: engine"][0]["status"] == "ok"


def test_no_gpu_box(ws):
    f = _by_topic(_doctor(ws, "nogpu"))
    assert f["GPUs"][0]["status"] == "missing"
    assert "lspci" in f["GPUs"][0]["fix"]
    assert "GPU" not in f
    assert "driver" not in f
    assert "GuC firmware" not in f
    assert f["Level Zero loader"][0]["status"] == "missing"
    assert "libze1" in f["Level Zero loader"][0]["fix"]
    assert f["compute runtime"][0]["status"] == "missing"
    assert f["oneAPI"][0]["status"] == "warn"
    assert f["oneCCL"][0]["status"] == "warn"


def test_render_node_without_permission(ws):
    root = HOSTS["noperm"].make(ws.root / "host-noperm")
    argv = ws.cli.argv(["doctor", "--json"])
    if os.geteuid() == 0:
        argv = [*WITHOUT_DAC, *argv]  # root opens any file; without those capabilities it is a plain user
    r = subprocess.run(argv, cwd=ws.root, env={**ws.env, "TOOLCHAIN_HOST_ROOT": str(root)}, capture_output=True,
                       text=True, timeout=120)
    res = Result(argv, r.returncode, r.stdout, r.stderr)
    assert res.returncode == 0, str(res)
    (access,) = _by_topic(res.json())["render access"]
    assert access["status"] == "missing"
    assert "cannot open" in access["value"]
    assert access["fix"].startswith("sudo usermod -aG video $USER")


def test_doctor_lines_for_a_person(ws):
    root = HOSTS["b60x1"].make(ws.root / "host")
    out = ws.cli.ok("doctor", env={"TOOLCHAIN_HOST_ROOT": str(root), "COLUMNS": "250"}).stdout
    lines = out.splitlines()
    assert any(line.startswith("ok") and "kernel" in line and "7.1.2-generic" in line for line in lines)
    assert any(line.startswith("missing") and "torch" in line and "fix: pip install" in line for line in lines)


@pytest.mark.parametrize(("release", "expected"), [("7.1.0-rc2", (7, 1)), ("6.14.0-37-generic", (6, 14)), ("x", (0, 0))])
def test_kernel_version(release, expected):
    from toolchain.target.doctor import kernel_version

    assert kernel_version(release) == expected
