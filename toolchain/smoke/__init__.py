"""`toolchain smoke`: install a lock's wheels, serve, run a named regression set, triage, report.

One module per concern: `install` (wheels → target environment, version check), `devices` (B60/B70
profiles, card check), `server` (start without oneAPI, readiness, stop), `cases` (the regression set),
`triage` (known failure signatures), `report` (report.json, summary.md, junit.xml), `ladder` (one
optimization at a time), `config` (lock [smoke] + options → `SmokeConfig`), `runner` (one pass of the set
against one server), `session` (`run_smoke()`, the whole stage), `command` (the CLI).
"""

from toolchain.smoke.config import SmokeOptions
from toolchain.smoke.session import SmokeOutcome, run_smoke

__all__ = ["SmokeOptions", "SmokeOutcome", "run_smoke"]
