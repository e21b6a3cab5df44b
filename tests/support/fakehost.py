"""Fake host roots for `TOOLCHAIN_HOST_ROOT`: a folder laid out as / is on a B60/B70 box (sysfs cards with
their PCI vendor/device and driver, /dev/dri render nodes, /proc, dpkg's status, GuC/HuC debugfs,
/opt/intel/oneapi). Nothing in it is a device: the tool reads files, and these are the files it reads."""

from __future__ import annotations

import grp
import os
from dataclasses import dataclass, field
from pathlib import Path

B60, B70 = 0xE211, 0xE223
GiB = 1 << 30


@dataclass
class FakeCard:
    pci_id: int
    driver: str = "xe"
    vendor: int = 0x8086


@dataclass
class FakeHost:
    cards: list[FakeCard] = field(default_factory=list)
    kernel: str = "7.1.2-generic"
    memory: int = 64 * GiB
    render_access: bool = True       # False: the node belongs to another user and a group we are not in
    loader: str = "1.21.9"
    compute_runtime: str = "25.48.36300.8"
    guc: str = "70.44.1"
    oneapi: tuple[str, ...] = ("2026.1",)
    ccl: tuple[str, ...] = ("2021.17",)

    def make(self, root: Path) -> Path:
        drm = root / "sys/class/drm"
        drm.mkdir(parents=True)
        for i, card in enumerate(self.cards):
            slot = f"0000:{3 + i:02x}:00.0"
            dev = root / "sys/devices/pci0000:00" / slot
            dev.mkdir(parents=True)
            (dev / "vendor").write_text(f"0x{card.vendor:04x}\n")
            (dev / "device").write_text(f"0x{card.pci_id:04x}\n")
            if card.driver:
                drv = root / "sys/bus/pci/drivers" / card.driver
                drv.mkdir(parents=True, exist_ok=True)
                (dev / "driver").symlink_to(drv)
            (drm / f"card{i}").mkdir()
            (drm / f"card{i}" / "device").symlink_to(dev)
            (drm / f"card{i}-DP-1").mkdir()  # a connector, not a card
            node = root / "dev/dri" / f"renderD{128 + i}"
            node.parent.mkdir(parents=True, exist_ok=True)
            node.write_text("")
            video = grp.getgrnam("video").gr_gid
            if self.render_access:
                os.chown(node, os.getuid(), video)
            else:
                os.chown(node, 65534, video)  # nobody's, group video, which this user is not in
            os.chmod(node, 0o660)
            uc = root / "sys/kernel/debug/dri" / str(i) / "gt0/uc"
            if self.guc:
                uc.mkdir(parents=True)
                (uc / "guc_info").write_text(f"GuC firmware: xe/bmg_guc_70.bin\n\tstatus: RUNNING\n"
                                             f"\tversion: wanted 70.29.2, found {self.guc}\n")
                (uc / "huc_info").write_text("HuC firmware: xe/bmg_huc.bin\n\tstatus: RUNNING\n"
                                             "\tversion: found 8.2.10\n")
        (root / "proc/sys/kernel").mkdir(parents=True)
        (root / "proc/sys/kernel/osrelease").write_text(self.kernel + "\n")
        (root / "proc/meminfo").write_text(f"MemTotal:       {self.memory // 1024} kB\n"
                                           f"MemAvailable:   {self.memory // 2048} kB\n")
        status = []
        if self.loader:
            status.append(f"Package: libze1\nStatus: install ok installed\nVersion: {self.loader}-1\n")
        if self.compute_runtime:
            status.append(f"Package: libze-intel-gpu1\nStatus: install ok installed\n"
                          f"Version: {self.compute_runtime}-1\n")
        (root / "var/lib/dpkg").mkdir(parents=True)
        (root / "var/lib/dpkg/status").write_text("\n".join(status))
        for version in self.oneapi:
            (root / "opt/intel/oneapi/compiler" / version).mkdir(parents=True)
        for version in self.ccl:
            (root / "opt/intel/oneapi/ccl" / version).mkdir(parents=True)
        return root


HOSTS = {
    "b60x1": FakeHost([FakeCard(B60)]),
    "b70x2": FakeHost([FakeCard(B70), FakeCard(B70)], kernel="6.14.0-37-generic"),
    "nogpu": FakeHost([], guc="", loader="", compute_runtime="", oneapi=(), ccl=()),
    "noperm": FakeHost([FakeCard(B70)], render_access=False),
}

# Run the tool as root without the capabilities that let root open any file (CAP_DAC_OVERRIDE,
# CAP_DAC_READ_SEARCH), so a render node it may not open is reported as such (as for a normal user).
WITHOUT_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search",
               "--inh-caps=-dac_override,-dac_read_search"]
