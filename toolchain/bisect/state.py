"""The bisect state file: one JSON document holding `context` (what the command needs to resume: the
options, the resume command line, whether it is done) and one section per bisect phase (a `BisectState`).
Every write replaces the file atomically, so a kill at any moment leaves the last complete step."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolchain.bisect.core import BisectState
from toolchain.core.fs import atomic_write_text, mine, open_regular
from toolchain.errors import UsageError

STATE_VERSION = 1
STATE_NAME = "bisect-state.json"


class StateFile:
    """One JSON document: `context` (what the command needs to resume) and one section per bisect phase."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._doc: dict[str, Any] | None = None

    def read(self) -> dict[str, Any]:
        """The state file's document (empty when there is none yet); a UsageError for a file of another kind."""
        if self._doc is None:
            if not self.path.is_file():
                self._doc = {}
            else:
                try:
                    with open_regular(self.path) as (fh, st):
                        if not mine(st):  # (it names the folders the bisect writes and removes in)
                            raise UsageError(f"{self.path}: a bisect state file of uid {st.st_uid} or that others "
                                             f"may write (mode {stat.S_IMODE(st.st_mode):o}): not read",
                                             hint="pass --state/--out of a bisect you started")
                        self._doc = json.loads(fh.read().decode("utf-8"))
                except OSError as exc:
                    raise UsageError(f"{self.path}: cannot be read as a bisect state file ({exc})",
                                     hint="pass the bisect-state.json written by `toolchain bisect`") from None
                except ValueError as exc:
                    raise UsageError(f"{self.path}: not a bisect state file ({exc})",
                                     hint="pass the bisect-state.json written by `toolchain bisect`") from None
                if not isinstance(self._doc, dict) or self._doc.get("state-version") != STATE_VERSION:
                    version = self._doc.get("state-version") if isinstance(self._doc, dict) else None
                    self._doc = None
                    raise UsageError(f"{self.path}: state-version {version!r} "
                                     f"is not supported (this tool writes {STATE_VERSION})")
        return self._doc

    def update(self, **items: Any) -> None:
        """Write the document with `items` merged in, atomically."""
        doc = {**self.read(), "state-version": STATE_VERSION, **items}
        atomic_write_text(self.path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
        self._doc = doc

    @property
    def unfinished(self) -> bool:
        """A bisect has started here (a phase recorded) and not finished."""
        doc = self.read()
        return bool(doc.get("phases")) and not doc.get("done")

    def load(self, section: str) -> BisectState | None:
        """The saved state of the bisect phase `section`, None when it has none."""
        data = self.read().get("phases", {}).get(section)
        return BisectState.from_dict(data) if data else None

    def save(self, section: str, state: BisectState) -> None:
        """Save the state of the bisect phase `section`, keeping the other phases."""
        self.update(phases={**self.read().get("phases", {}), section: state.to_dict()})

    def retry_build_failures(self) -> None:
        """Forget the verdicts of every phase's candidates that were skipped because their build failed, so
        they are built again (`--retry-unbuildable`)."""
        phases = self.read().get("phases", {})
        if phases:
            self.update(phases={name: BisectState.from_dict(data).without_build_failures().to_dict()
                                for name, data in phases.items()}, done=False)

    def saver(self, section: str) -> Callable[[BisectState], None]:
        """A function saving the state of phase `section`, for the bisector to call after each step."""
        return lambda state: self.save(section, state)
