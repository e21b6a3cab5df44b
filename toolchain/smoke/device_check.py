"""The check that the cards present match the smoke request (the device facts and profiles are
toolchain.core.devices').

Cards are found in the target smoke serves from (the host or a container: the one discovery,
toolchain/scripts/cards.py, run there as a file) under /sys/class/drm (vendor 0x8086, PCI device id of a
Battlemage die) with their /dev/dri node, with `xpu-smi discovery -j` as a fallback when sysfs shows none
(some containers); `sycl-ls` output is recorded for the report. Both tools run in the target too. The check
is by die: B60 is BMG-G21 (one card), B70 is BMG-G31 (one or two cards). The device ids are those the Intel compute runtime lists per die (intel/compute-runtime device_ids_configs_bmg.h).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from toolchain.core import devices as facts
from toolchain.core.devices import PROFILES, Card, DeviceProfile, cards_from
from toolchain.core.proc.runner import CommandTimeout
from toolchain.core.record import field, record
from toolchain.core.serial import Data, meta
from toolchain.errors import UsageError

if TYPE_CHECKING:
    from toolchain.target import Interpreter
    from toolchain.target.base import Place

TOOL_TIMEOUT = 20


def _describe_cards(cards: Sequence[Card]) -> Data:
    return [c.describe() for c in cards]


@record(kw_only=True)
class DeviceCheck:
    """The outcome of checking that the requested cards are present: which were found and the affinity mask."""
    device: str
    cards_needed: int
    affinity_mask: str
    cards: tuple[Card, ...] = field(metadata=meta(dump=_describe_cards))
    ok: bool
    message: str
    skipped: bool = False
    tools: Mapping[str, str] = field(default_factory=dict)  # raw sycl-ls / xpu-smi output, for the report


def profile(name: str) -> DeviceProfile:
    """The device profile named `name` (b60, b70, ...); a UsageError listing the known ones otherwise."""
    try:
        return PROFILES[name.lower()]
    except KeyError:
        raise UsageError(f"unknown device {name!r}", hint=f"use one of: {', '.join(PROFILES)}") from None


def mask_cards(mask: str) -> list[int]:
    """Card indices named by ZE_AFFINITY_MASK ("0,1", or "0.0,1.0" for card.tile)."""
    cards: list[int] = []
    for part in mask.split(","):
        part = part.strip()
        if not part:
            continue
        head = part.split(".")[0]
        if not head.isdigit():
            raise UsageError(f"ZE_AFFINITY_MASK={mask!r}: {part!r} is not a card index",
                             hint="use card indices, e.g. ZE_AFFINITY_MASK=0,1")
        if int(head) not in cards:
            cards.append(int(head))
    return cards


def device_env(prof: DeviceProfile, tp: int, env: Mapping[str, str]) -> dict[str, str]:
    """The serve environment a profile adds (the recipe's env wins where it sets the same name)."""
    if tp < 1:
        raise UsageError(f"tensor-parallel-size {tp} must be at least 1")
    if tp > prof.max_cards:
        raise UsageError(f"{prof.product} serves on at most {prof.max_cards} card(s); tensor-parallel-size is {tp}",
                         hint="use --device b70 for two cards, or tensor-parallel-size = 1")
    added = {"ZE_AFFINITY_MASK": ",".join(str(i) for i in range(tp)), "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    out = {k: v for k, v in added.items() if k not in env}
    mask = env.get("ZE_AFFINITY_MASK", out.get("ZE_AFFINITY_MASK", ""))
    if len(mask_cards(mask)) != tp:
        raise UsageError(f"ZE_AFFINITY_MASK={mask} names {len(mask_cards(mask))} card(s) but "
                         f"tensor-parallel-size is {tp}", hint="name one card per tensor-parallel rank")
    return out


def xpu_smi_cards(runtime: Place | None = None) -> list[Card]:
    """Cards as `xpu-smi discovery -j` lists them in `runtime` (None: this machine); empty when xpu-smi is
    absent there or fails."""
    out = _tool_output(["xpu-smi", "discovery", "-j"], runtime)
    try:
        devices = json.loads(out).get("device_list", []) if out else []
    except (ValueError, AttributeError):
        return []
    cards: list[Card] = []
    for d in devices:
        try:
            pci_id = int(str(d.get("pci_device_id", "")), 16)
        except ValueError:
            continue
        cards.append(Card(f"xpu-smi:{d.get('device_id', len(cards))}", pci_id, str(d.get("pci_bdf_address", ""))))
    return cards


def tool_reports(runtime: Place | None = None) -> dict[str, str]:
    """What sycl-ls and xpu-smi print in `runtime` (None: this machine), for the report."""
    reports = {}
    for argv in (["sycl-ls"], ["xpu-smi", "discovery"]):
        out = _tool_output(argv, runtime)
        if out:
            reports[" ".join(argv)] = out
    return reports


def _tool_output(argv: list[str], runtime: Place | None) -> str:
    """What the tool printed; "" when it is not installed, fails or hangs."""
    from toolchain.target import HostRuntime

    try:
        done = (runtime or HostRuntime()).run(argv, capture=True, check=False, timeout=TOOL_TIMEOUT)
    except CommandTimeout:
        return ""
    return done.stdout if done.returncode == 0 else ""


def check(device: str, tp: int, mask: str, cards: list[Card], tools: Mapping[str, str] | None = None) -> DeviceCheck:
    """Do the cards present match the requested device and count? Pure: the caller finds the cards."""
    prof = profile(device)
    wanted = mask_cards(mask) if mask else list(range(tp))
    need = max(wanted) + 1 if wanted else tp

    def result(ok: bool, message: str) -> DeviceCheck:
        return DeviceCheck(device=device, cards_needed=len(wanted), affinity_mask=mask, cards=tuple(cards), ok=ok,
                           message=message, tools=tools or {})

    found = "; ".join(c.describe() for c in cards) or "none"
    if not cards:
        return result(False, f"--device {device} needs {len(wanted)} {prof.product} card(s), but no Intel GPU was "
                             f"found (checked /sys/class/drm, /dev/dri and xpu-smi)")
    matching = [c for c in cards if c.pci_id in prof.pci_ids]
    selected = [cards[i] for i in wanted if i < len(cards)]
    if len(cards) < need:
        return result(False, f"ZE_AFFINITY_MASK={mask or ','.join(map(str, wanted))} needs card index {need - 1}, "
                             f"but only {len(cards)} Intel GPU(s) are present: {found}")
    wrong = [c for c in selected if c.pci_id not in prof.pci_ids]
    if wrong:
        other = facts.profile_of(wrong[0].pci_id)
        tip = f" (that is a {other.product}: use --device {other.name})" if other else ""
        return result(False, f"--device {device} asks for {prof.product} ({prof.die}) but the selected card is "
                             f"{wrong[0].describe()}{tip}. Present: {found}")
    return result(True, f"{len(selected)} of {len(matching)} {prof.product} card(s) selected: "
                        + "; ".join(c.describe() for c in selected))


def skipped(device: str, tp: int, mask: str) -> DeviceCheck:
    """The device check result when --skip-device-check turned the check off."""
    return DeviceCheck(device=device, cards_needed=tp, affinity_mask=mask, cards=(), ok=True,
                       message="device check skipped (--skip-device-check)", skipped=True)


class DeviceMismatch(UsageError):
    """The cards present do not match the requested device or count."""


def check_in(target: Interpreter, device: str, tp: int, mask: str) -> DeviceCheck:
    """The cards as the target smoke serves from sees them (`target`: an interpreter there, which runs the
    discovery): Intel GPUs in its sysfs whose /dev/dri node is there, else as xpu-smi lists them there. Raises
    DeviceMismatch when they do not match the request."""
    runtime = target.runtime
    rows = json.loads(runtime.run([target.python, target.script("cards.py")], capture=True).stdout)
    cards, hidden = cards_from(rows, visible_only=True)
    found = check(device, tp, mask, cards or xpu_smi_cards(runtime), tool_reports(runtime))
    if found.ok:
        return found
    where = runtime.describe()
    if not found.cards:
        seen = f"; its sysfs shows {hidden}, but none is in its /dev/dri" if hidden else ""
        raise DeviceMismatch(f"{where}: {found.message}{seen}",
                             hint="check the cards and their driver (`toolchain doctor`); a container needs them "
                                  "given (--device=/dev/dri: in [target] run-args, or when starting it); or pass "
                                  "--skip-device-check to run without cards")
    raise DeviceMismatch(f"{where}: {found.message}",
                         hint="pick the --device and tensor-parallel-size that match the cards, or "
                              "pass --skip-device-check")
