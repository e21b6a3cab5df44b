"""`toolchain smoke`: install a lock's wheels, serve, run a named regression set, triage, report.

One module per concern: `install` (wheels → target environment, version check), `devices` (B60/B70
profiles, card check), `server` (start without oneAPI, readiness, stop), `cases` (the regression set),
`triage` (known failure signatures), `report` (report.json, summary.md, junit.xml), `ladder` (one
optimization at a time), `config` (lock [smoke] + options → `SmokeConfig`), `runner` (one pass of the set
against one server), `session` (`run_smoke()`, the whole stage), `command` (the CLI).

The library's names (`run_smoke`, `SmokeOptions`, `SmokeOutcome`) are here too, each imported from its module on
first use (`_LAZY`: name -> module), so that importing one module (`triage`, say) loads none of the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolchain.core.lazy import lazy_exports

if TYPE_CHECKING:
    from toolchain.smoke.config import SmokeOptions
    from toolchain.smoke.session import SmokeOutcome, run_smoke

__all__ = ["SmokeOptions", "SmokeOutcome", "run_smoke"]
_LAZY = {"SmokeOptions": "config", "SmokeOutcome": "session", "run_smoke": "session"}
__getattr__ = lazy_exports(__name__, _LAZY)
