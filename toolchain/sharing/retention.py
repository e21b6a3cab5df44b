"""Which entries of the remote wheel cache a retention rule removes (`toolchain cache prune --remote`); the local
cache's rule is build/localprune.py, which shares the age parsing and wording.

    --keep N          each component keeps its N newest entries, whatever their age
    --older-than AGE  of the rest, what was stored before now - AGE goes (AGE: 30d, 12h, 2w, 90m, 3600s)

Both: an entry goes when it is older than AGE and not among its component's N newest. `--keep` alone: every
entry beyond the N newest goes. An entry with no readable creation date is kept (and said so). Entries are
manifests: two tags naming one manifest are removed together, or (one of them kept) not at all.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from toolchain.core.record import record
from toolchain.core.regex import Regex

if TYPE_CHECKING:
    from toolchain.sharing.registry import Registry, RemoteEntry

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = Regex(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_age(text: str) -> float:
    """"30d", "12h", "2w", "90m", "3600s" → seconds; ValueError when it is not such an age."""
    m = _AGE.match(text)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"{text!r} is not an age; write it like 30d, 12h, 2w, 90m or 3600s")
    return float(m.group(1)) * UNITS[m.group(2)]


def created_at(stamp: str) -> float | None:
    """An entry's `org.opencontainers.image.created` (RFC 3339, as this tool writes it) → epoch seconds."""
    m = re.match(r"^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:\.\d+)?(Z|[+-]\d{2}:?\d{2})?$", stamp.strip())
    if not m:
        return None
    try:
        seconds = calendar.timegm(time.strptime(f"{m.group(1)}T{m.group(2)}", "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    zone = m.group(3) or "Z"
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        hh, mm = int(zone[1:3]), int(zone[-2:])
        seconds -= sign * (hh * 3600 + mm * 60)
    return float(seconds)


@record
class Dated:
    """One entry as the rule sees it."""
    key: str
    digest: str
    component: str
    created: str


@record
class Verdict:
    """Whether one remote cache entry is kept or removed by the retention rules, and why."""
    entry: Dated
    remove: bool
    why: str


def decide(entries: Sequence[Dated], now: float, older_than: float | None, keep: int | None) -> list[Verdict]:
    """A verdict for every entry, in the order given. `older_than`: seconds, or None; `keep`: N, or None
    (one of them is given)."""
    by_component: dict[str, list[Dated]] = {}
    for e in entries:
        by_component.setdefault(e.component, []).append(e)
    rank: dict[str, int] = {}
    for group in by_component.values():
        newest_first = sorted(group, key=lambda e: (created_at(e.created) or float("inf"), e.key), reverse=True)
        for i, e in enumerate(newest_first):
            rank[e.key] = i
    verdicts = []
    for e in entries:
        when = created_at(e.created)
        if when is None:
            verdicts.append(Verdict(e, False, "no creation date: kept"))
        elif keep is not None and rank[e.key] < keep:
            verdicts.append(Verdict(e, False, f"among the {keep} newest of {e.component or 'its component'}"))
        elif older_than is not None and when >= now - older_than:
            verdicts.append(Verdict(e, False, f"stored {age_text(now - when)} ago: within {age_text(older_than)}"))
        else:
            why = [f"stored {age_text(now - when)} ago"] if older_than is not None else []
            why += [f"not among the {keep} newest"] if keep is not None else []
            verdicts.append(Verdict(e, True, ", ".join(why)))
    kept_digests = {v.entry.digest for v in verdicts if not v.remove}
    return [Verdict(v.entry, False, "its manifest is also another, kept entry's") if v.remove and
            v.entry.digest in kept_digests else v for v in verdicts]


@record
class Pruned:
    """What a prune of the remote cache saw and did: the entries, a verdict for each, and how many went."""
    entries: tuple[RemoteEntry, ...]   # what the registry held (of the component asked for)
    verdicts: tuple[Verdict, ...]      # one per entry, in the same order
    deleted: int                       # manifests deleted (0 in a dry run)


def prune(registry: Registry, *, component: str, older_than: float | None, keep: int | None, dry_run: bool,
          status: Callable[[str], AbstractContextManager[None]]) -> Pruned:
    """Apply the rule to the registry's entries: one DELETE per manifest that goes (none in a dry run).
    RemoteError: the registry failed or refused (after some deletes: the message says how many)."""
    from toolchain.sharing.registry import CREATED, A, RemoteError

    with status(f"reading {registry.settings.url}"):
        entries = registry.entries(component)
    verdicts = decide([Dated(e.key, e.digest, e.annotations.get(A + "component", ""), e.annotations.get(CREATED, ""))
                       for e in entries], time.time(), older_than, keep)
    digests = [] if dry_run else list(dict.fromkeys(v.entry.digest for v in verdicts if v.remove))
    for done, digest in enumerate(digests):
        try:
            with status(f"deleting {digest[:19]} from {registry.settings.url}"):
                registry.delete(digest)
        except RemoteError as exc:
            if not done:
                raise
            raise RemoteError(f"{exc} (after deleting {done} of {len(digests)} manifests; the rest are still there)",
                              hint=exc.hint) from None
    return Pruned(tuple(entries), tuple(verdicts), len(digests))


def size_text(n: int) -> str:
    """A byte count as a prune report words it (kB, MB, GB)."""
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def age_text(seconds: float) -> str:
    """An age in seconds as a prune report words it (30s, 5m, 2.5h, 3d)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}".replace(".0" + unit, unit)
    return f"{max(seconds, 0):.0f}s"


__all__ = ["Dated", "Pruned", "Verdict", "age_text", "created_at", "decide", "parse_age", "prune", "size_text"]
