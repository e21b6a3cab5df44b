"""The device facts, owned here once: Intel's PCI vendor id, the Battlemage dies and their device ids, the card
profiles a recipe names (B60, B70: product, die, AOT target, how many cards a profile serves on), and the cards
a sysfs tree shows. The recipe check, smoke's device check and `toolchain doctor` all read them here.

Finding the cards is one discovery, toolchain/scripts/cards.py: called in-process for this machine (or the
folder TOOLCHAIN_HOST_ROOT names), run as a file in a target that is not this process (smoke's device check,
in a container or on the host); `cards_from` reads its rows either way.

The ids are those the Intel compute runtime lists per die (intel/compute-runtime device_ids_configs_bmg.h):
B60 is BMG-G21 (0xE211), B70 is BMG-G31 (0xE223 as sycl-ls shows it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from toolchain.core.record import record
from toolchain.scripts.cards import scan

VENDOR_INTEL = 0x8086
BMG_G21_IDS = frozenset({0xE202, 0xE209, 0xE20B, 0xE20C, 0xE20D, 0xE210, 0xE211, 0xE212, 0xE215, 0xE216})
BMG_G31_IDS = frozenset({0xE220, 0xE221, 0xE222, 0xE223})


@record(kw_only=True)
class DeviceProfile:
    """A supported card: its names, PCI ids and the architecture to build for."""

    name: str
    product: str
    die: str
    pci_ids: frozenset[int]
    max_cards: int
    ark_target: str
    aot_device: str

    @property
    def tensor_parallel_sizes(self) -> tuple[int, ...]:
        """The tensor-parallel sizes this card class supports: 1 to its most cards."""
        return tuple(range(1, self.max_cards + 1))


PROFILES = {
    "b60": DeviceProfile(name="b60", product="Intel Arc Pro B60", die="BMG-G21", pci_ids=BMG_G21_IDS, max_cards=1,
                         ark_target="intel_gpu_bmg_g21", aot_device="bmg-g21-a0"),
    "b70": DeviceProfile(name="b70", product="Intel Arc Pro B70", die="BMG-G31", pci_ids=BMG_G31_IDS, max_cards=2,
                         ark_target="intel_gpu_bmg_g31", aot_device="bmg-g31-a0"),
}
DEFAULT_DEVICE = "b70"


def profile_of(pci_id: int) -> DeviceProfile | None:
    """The device profile whose PCI ids include `pci_id`, None for a card no profile knows."""
    return next((p for p in PROFILES.values() if pci_id in p.pci_ids), None)


@record
class Card:
    """A card found on this machine."""

    node: str       # card0, or "xpu-smi:0"
    pci_id: int
    slot: str       # PCI address, e.g. 0000:03:00.0
    driver: str = ""  # xe | i915 (sysfs device/driver), "" when not readable

    @property
    def die(self) -> str:
        """The card's die and class ("BMG-G21 (B60 class)"), or "other Intel GPU" for an unknown device id."""
        prof = profile_of(self.pci_id)
        return f"{prof.die} ({prof.name.upper()} class)" if prof else "other Intel GPU"

    def describe(self) -> str:
        """The card for a message: render node, die, PCI device id and slot."""
        return f"{self.node} {self.die}, device 0x{self.pci_id:04x} at {self.slot or '?'}"


def find_cards(root: Path = Path("/")) -> list[Card]:
    """Intel GPUs under <root>/sys/class/drm, one per PCI device, in PCI order (Level Zero's default order)."""
    return cards_from(scan(str(root)))[0]


def cards_from(rows: Iterable[Mapping[str, object]], *, visible_only: bool = False) -> tuple[list[Card], int]:
    """The Intel GPUs among the discovery's rows (toolchain/scripts/cards.py), one per PCI device in PCI order,
    and how many Intel cards were left out for want of their /dev/dri node (`visible_only`: a target that
    sees the host's sysfs without the devices)."""
    by_slot: dict[str, Card] = {}
    hidden = 0
    for row in rows:
        vendor, device = row.get("vendor"), row.get("device")
        if vendor != VENDOR_INTEL or not isinstance(device, int):
            continue
        if visible_only and not row.get("visible"):
            hidden += 1
            continue
        node, slot = str(row.get("node", "")), str(row.get("slot", ""))
        by_slot.setdefault(slot or node, Card(node, device, slot, str(row.get("driver", ""))))
    return [by_slot[k] for k in sorted(by_slot)], hidden
