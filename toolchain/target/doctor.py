"""`toolchain doctor`'s findings: each fact of the box (toolchain.target.hostfacts) and of the target
interpreter (torch, its XPU build, the cards torch sees, the stack's versions) as one line, ok / warn /
missing, with the fix a B60/B70 user would be told in a bug report."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from toolchain.core.devices import PROFILES, Card, find_cards, profile_of
from toolchain.core.record import record
from toolchain.target.hostfacts import HostFacts

if TYPE_CHECKING:
    from toolchain.target.base import Place

PROBE_TIMEOUT = 300  # importing an XPU torch and opening Level Zero takes seconds, more on a cold disk
STACK_DISTS = ("vllm", "vllm-xpu-kernels", "auto-round-lib", "oneccl", "oneccl-bind-pt", "intel-sycl-rt")
XPU_INDEX = "https://download.pytorch.org/whl/xpu"
B70_TP2_KERNEL = (7, 1)  # vLLM #41663: B70 TP=2 general-protection faults, fixed by host kernel >= 7.1


@record
class RenderNode:
    """A DRM render node: its path as the host names it, whether this user may open it, and its group."""
    path: str          # /dev/dri/renderD128, as the host names it
    access: bool       # this user can open it read-write
    group: str         # the group that owns it (render, video)


def render_nodes(root: Path) -> list[RenderNode]:
    """/dev/dri/renderD* under the root and whether this user may open each read-write."""
    import grp

    out = []
    for node in sorted((root / "dev/dri").glob("renderD*")):
        try:
            gid = node.stat().st_gid
            group = grp.getgrgid(gid).gr_name
        except (OSError, KeyError):
            group = ""
        out.append(RenderNode("/" + str(node.relative_to(root)), os.access(node, os.R_OK | os.W_OK), group))
    return out


Status = Literal["ok", "warn", "missing"]
OK: Status = "ok"
WARN: Status = "warn"
MISSING: Status = "missing"


@record
class Finding:
    """One line of doctor's report: a topic, its status (ok, warn, missing), what was found and the fix."""
    topic: str
    status: Status
    value: str
    fix: str = ""


def host_findings(facts: HostFacts, root: Path, device: str = "", tensor_parallel: int = 1) -> list[Finding]:
    """The box: GPUs, driver, render access, kernel, firmware, Level Zero, compute runtime, memory."""
    out: list[Finding] = []
    cards = find_cards(root)
    if not cards:
        out.append(Finding("GPUs", MISSING, "no Intel GPU (vendor 0x8086) under /sys/class/drm",
                           "seat the card and check `lspci -nn -d 8086:`; builds run without a card, smoke "
                           "needs one (or --skip-device-check)"))
    for card in cards:
        prof = profile_of(card.pci_id)
        out.append(Finding("GPU", OK if prof else WARN, card.describe(),
                           "" if prof else "not a Battlemage card (B60 0xe211, B70 0xe223): the kernels' AOT "
                                           "targets (VLLM_XPU_AOT_DEVICES) may not cover it"))
    if device in PROFILES and cards:
        prof = PROFILES[device]
        have = [c for c in cards if c.pci_id in prof.pci_ids]
        if len(have) < tensor_parallel:
            out.append(Finding("cards for the recipe", WARN,
                               f"[smoke] device {device} × {tensor_parallel}: {len(have)} {prof.product} card(s) here",
                               f"smoke on a box with {tensor_parallel} {prof.product} card(s), or set [smoke] "
                               f"device / tensor-parallel-size to what is here"))
    for card in cards:
        if card.driver == "xe":
            out.append(Finding("driver", OK, f"{card.node}: xe"))
        elif card.driver:
            out.append(Finding("driver", WARN, f"{card.node}: {card.driver}",
                               "Battlemage runs on the xe driver: a kernel >= 6.12 with xe loaded "
                               "(`modprobe xe`; i915.force_probe=!<id> xe.force_probe=<id> on older kernels)"))
        else:
            out.append(Finding("driver", MISSING, f"{card.node}: no kernel driver bound",
                               "load the xe driver (`sudo modprobe xe`), kernel >= 6.12"))
    nodes = render_nodes(root)
    if cards and not nodes:
        out.append(Finding("render nodes", MISSING, "no /dev/dri/renderD* node",
                           "the driver made no render node: check `dmesg | grep -i xe`; in a container pass "
                           "--device=/dev/dri"))
    for node in nodes:
        group = node.group or "render"
        out.append(Finding("render access", OK, f"{node.path} (group {group}): read-write") if node.access else
                   Finding("render access", MISSING, f"{node.path} (group {group}): this user cannot open it",
                           f"sudo usermod -aG {group} $USER (and video), then log in again"))
    out.append(_kernel(facts, cards))
    if cards:
        for name, version in (("GuC firmware", facts.guc), ("HuC firmware", facts.huc)):
            out.append(Finding(name, OK, version) if version else
                       Finding(name, WARN, "not readable here (debugfs)",
                               f"as root: cat /sys/kernel/debug/dri/0/gt0/uc/{name[:3].lower()}_info"))
    out.append(Finding("Level Zero loader", OK, facts.level_zero) if facts.level_zero else
               Finding("Level Zero loader", MISSING, "libze_loader.so.1 not found",
                       "install the Level Zero loader (Debian/Ubuntu: libze1) from Intel's GPU repository"))
    out.append(Finding("compute runtime", OK, facts.compute_runtime) if facts.compute_runtime else
               Finding("compute runtime", MISSING, "no Level Zero GPU driver (libze_intel_gpu.so.1)",
                       "install intel/compute-runtime (libze-intel-gpu1, intel-opencl-icd)"))
    return out


def _kernel(facts: HostFacts, cards: Sequence[Card]) -> Finding:
    if not facts.kernel:
        return Finding("kernel", WARN, "unknown (/proc/sys/kernel/osrelease not readable)", "")
    b70s = [c for c in cards if c.pci_id in PROFILES["b70"].pci_ids]
    if len(b70s) >= 2 and kernel_version(facts.kernel) < B70_TP2_KERNEL:
        return Finding("kernel", WARN, facts.kernel,
                       "two B70 cards on a kernel older than 7.1: tensor-parallel-size 2 meets general-protection "
                       "faults (vLLM #41663); boot kernel >= 7.1 and use vllm-xpu-kernels >= 0.1.13.2")
    return Finding("kernel", OK, facts.kernel)


def kernel_version(release: str) -> tuple[int, int]:
    """The (major, minor) of a kernel release string such as 6.8.0-45-generic; (0, 0) when unreadable."""
    parts = ([*release.split("-", maxsplit=1)[0].split("."), "0", "0"])[:2]
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except ValueError:
        return (0, 0)


def oneapi_findings(facts: HostFacts, captured: str, setvars: str, why_missing: str, stand_in: bool) -> list[Finding]:
    """The oneAPI a recipe's setvars gives (`captured`), else what is installed under /opt/intel/oneapi."""
    out = []
    if captured:
        label = " (the labelled oneAPI STAND-IN, not oneAPI)" if stand_in else ""
        out.append(Finding("oneAPI", WARN if stand_in else OK, f"{captured} from {setvars}{label}",
                           "install the oneAPI Base Toolkit to build real kernels" if stand_in else ""))
    elif setvars:
        out.append(Finding("oneAPI", MISSING, f"{setvars}: {why_missing or 'not captured'}",
                           "install the oneAPI Base Toolkit (2026.1 for vllm-xpu-kernels >= 0.1.14) or fix "
                           "[toolchain] setvars"))
    elif facts.oneapi:
        out.append(Finding("oneAPI", OK, "compiler " + ", ".join(facts.oneapi) + " under /opt/intel/oneapi"))
    else:
        out.append(Finding("oneAPI", WARN, "no compiler under /opt/intel/oneapi",
                           "needed to build the kernels (not to serve): install the oneAPI Base Toolkit"))
    return out


def interpreter_findings(runtime: Place, python: str, facts: HostFacts, device: str = "") -> list[Finding]:
    """torch in the target interpreter: its version, XPU build, torch.xpu.is_available(), device count;
    the stack's versions; oneCCL (installed or in the interpreter)."""
    r = runtime.run([python, runtime.script("torch_xpu.py"), "torch", *STACK_DISTS], capture=True, check=False,
                    timeout=PROBE_TIMEOUT)
    try:
        data = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [Finding("target interpreter", MISSING, f"{python} in the {runtime.describe()} did not run "
                                                       f"(exit {r.returncode}): {(r.stderr or r.stdout)[-300:].strip()}",
                        "set [target] python to an interpreter that exists")]
    out: list[Finding] = []
    versions: dict[str, str] = data.get("versions", {})
    where = f"{python} ({runtime.describe()})"
    if not data.get("torch"):
        err = data.get("torch_error", "")
        out.append(Finding("torch", MISSING, f"not importable in {where}" + (f": {err}" if err else ""),
                           f"pip install torch --index-url {XPU_INDEX}"))
    else:
        out.append(Finding("torch", OK, f"{data['torch']} in {where}"))
        xpu = data.get("xpu_build", "")
        out.append(Finding("torch XPU build", OK, f"torch.version.xpu = {xpu}") if xpu else
                   Finding("torch XPU build", MISSING, f"torch {data['torch']} is not an XPU build",
                           f"pip install --force-reinstall torch --index-url {XPU_INDEX}"))
        count = int(data.get("count", 0))
        if data.get("available"):
            names = "; ".join(data.get("names", []))
            out.append(Finding("torch.xpu", OK, f"available, {count} device(s)" + (f": {names}" if names else "")))
            if facts.gpus and count < len(facts.gpus):
                out.append(Finding("torch.xpu devices", WARN, f"torch sees {count} of {len(facts.gpus)} GPUs",
                                   "check ZE_AFFINITY_MASK / ONEAPI_DEVICE_SELECTOR and each card's render access"))
        else:
            err = data.get("xpu_error", "")
            out.append(Finding("torch.xpu", WARN if not facts.gpus else MISSING,
                               "torch.xpu.is_available() is False" + (f": {err}" if err else ""),
                               "needs a card, the xe driver, render access and the compute runtime (lines above); "
                               "do not source oneAPI for serving (the torch XPU wheels carry their own runtime)"))
    for dist in ("vllm", "vllm-xpu-kernels", "auto-round-lib"):
        v = versions.get(dist, "")
        out.append(Finding(dist, OK, v) if v else
                   Finding(dist, WARN, f"not installed in {where}",
                           "`toolchain smoke --lock LOCK` installs exactly the lock's wheels into a fresh venv"))
    kv = versions.get("vllm-xpu-kernels", "")
    if kv and device == "b70" and len(facts.gpus) >= 2 and _release(kv) < (0, 1, 13, 2):
        out.append(Finding("vllm-xpu-kernels for B70 × 2", WARN, kv,
                           "B70 TP=2 needs vllm-xpu-kernels >= 0.1.13.2 (vLLM #41663)"))
    ccl = [f"{d} {versions[d]}" for d in ("oneccl", "oneccl-bind-pt") if versions.get(d)]
    ccl += [f"oneapi ccl {v}" for v in facts.oneccl]
    out.append(Finding("oneCCL", OK, ", ".join(ccl)) if ccl else
               Finding("oneCCL", WARN, "neither in the interpreter nor under /opt/intel/oneapi/ccl",
                       "tensor-parallel-size 2 needs oneCCL: the torch XPU wheels bring it (pip package oneccl)"))
    return out


def _release(version: str) -> tuple[int, ...]:
    nums = []
    for part in version.split("+", maxsplit=1)[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        nums.append(int(digits))
    return tuple(nums)
