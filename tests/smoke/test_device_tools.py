"""The device tools (xpu-smi, sycl-ls) run through toolchain.core.proc.runner: stand-in programs on PATH that
answer, fail, hang or are absent. No XPU here: the programs are labelled shell scripts, never real tools."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from toolchain.core.devices import Card
from toolchain.smoke import device_check

DISCOVERY = {"device_list": [
    {"device_id": 0, "pci_device_id": "0xe223", "pci_bdf_address": "0000:04:00.0"},
    {"device_id": 1, "pci_device_id": "0xe211", "pci_bdf_address": "0000:03:00.0"},
    {"device_id": 2, "pci_device_id": "not-hex", "pci_bdf_address": ""},
]}


def tool(bindir: Path, name: str, body: str) -> None:
    path = bindir / name
    path.write_text(f"#!/bin/sh\n# test stand-in for {name}, not the real tool\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def bindir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}/usr/bin{os.pathsep}/bin")
    return d


def test_xpu_smi_discovery_lists_the_cards(bindir):
    tool(bindir, "xpu-smi", f"[ \"$1 $2\" = 'discovery -j' ] && cat <<'EOF'\n{json.dumps(DISCOVERY)}\nEOF")
    cards = device_check.xpu_smi_cards()
    assert cards == [Card("xpu-smi:0", 0xE223, "0000:04:00.0"), Card("xpu-smi:1", 0xE211, "0000:03:00.0")]
    assert device_check.check("b70", 1, "0", cards).ok


def test_absent_failing_or_hanging_tools_give_nothing(bindir, monkeypatch):
    assert device_check.xpu_smi_cards() == []
    assert device_check.tool_reports() == {}
    tool(bindir, "xpu-smi", "echo 'partial output'; exit 3")
    tool(bindir, "sycl-ls", "echo '[level_zero:gpu][level_zero:0] stand-in'; exec sleep 30")
    monkeypatch.setattr(device_check, "TOOL_TIMEOUT", 1)
    assert device_check.xpu_smi_cards() == []
    assert device_check.tool_reports() == {}  # sycl-ls ran out of time, xpu-smi failed: neither report is kept
    tool(bindir, "sycl-ls", "echo '[level_zero:gpu][level_zero:0] stand-in'")
    assert device_check.tool_reports() == {"sycl-ls": "[level_zero:gpu][level_zero:0] stand-in\n"}
