"""What a compiled component was built against: the version (with its local build label, e.g. `2.14.0+xpu`)
of every distribution the recipe names in `built-against`, read inside the component's build environment,
and torch's C++11 ABI flag (toolchain/scripts/dists.py, run there). Nothing is imported: versions come from the installed metadata, and the ABI flag
from the `std::__cxx11` symbols of torch's libc10 (importing an XPU torch takes seconds)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.core.record import record
from toolchain.errors import BuildError

if TYPE_CHECKING:
    from toolchain.target.parts import Workspace

@record
class BuiltAgainst:
    """One distribution a compiled wheel was built against, as found in its build environment."""
    name: str
    version: str
    cxx11_abi: str = ""  # "1", "0", or "" when it cannot be read (no libc10 in the distribution)


def probe_built_against(ws: Workspace, python: str, names: tuple[str, ...], env: Mapping[str, str | None], cwd: str,
                        log: Path | None, what: str) -> tuple[BuiltAgainst, ...]:
    """Read `names` in the build environment of one component (the workspace, with the build's env)."""
    if not names:
        return ()
    done = ws.run([python, ws.script("dists.py"), "--abi", *names], env=env, cwd=cwd, log=log, capture=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    missing = [n for n in names if not found.get(n)]
    if missing:
        raise BuildError(f"{what}: the recipe says it is built against {', '.join(missing)}, but its build "
                         f"environment ({python}) has no such distribution installed",
                         hint=f"install the {missing[0]} build the wheel must run with into that interpreter "
                              f"(for the XPU stack: the torch XPU wheel), or drop it from `built-against`")
    return tuple(BuiltAgainst(n, found[n]["version"], found[n].get("cxx11-abi", "")) for n in names)
