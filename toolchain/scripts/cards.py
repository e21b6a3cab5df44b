"""The GPUs under a sysfs tree: one row per DRM card (`sys/class/drm/cardN`, connectors such as card0-DP-1
left out) with its PCI vendor and device id (None where unreadable), PCI slot, kernel driver, and whether its
/dev/dri node is there (a container may see the host's sysfs without the device nodes). Run as a file in a
target, it prints the rows as JSON; `toolchain.core.devices.find_cards` calls `scan` in-process for this
machine (or the folder TOOLCHAIN_HOST_ROOT names).

    python cards.py [ROOT]            (ROOT: "/" by default)
"""

from __future__ import annotations

import json
import os
import sys

DRM = os.path.join("sys", "class", "drm")


def read_hex(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip(), 16)
    except (OSError, ValueError):
        return None


def scan(root: str = "/") -> list[dict[str, object]]:
    """The cards under `root`, in the order of their names."""
    drm = os.path.join(root, DRM)
    try:
        names = sorted(n for n in os.listdir(drm) if n.startswith("card") and "-" not in n)
    except OSError:
        return []
    rows: list[dict[str, object]] = []
    for name in names:
        dev = os.path.join(drm, name, "device")
        if not os.path.exists(dev):
            continue
        driver = os.path.join(dev, "driver")
        rows.append({"node": name, "vendor": read_hex(os.path.join(dev, "vendor")),
                     "device": read_hex(os.path.join(dev, "device")),
                     "slot": os.path.basename(os.path.realpath(dev)),
                     "driver": os.path.basename(os.path.realpath(driver)) if os.path.exists(driver) else "",
                     "visible": os.path.exists(os.path.join(root, "dev", "dri", name))})
    return rows


if __name__ == "__main__":
    print(json.dumps(scan(sys.argv[1] if len(sys.argv) > 1 else "/")))
