"""The resolution step of the pipeline: built wheels (lock order) → checked closure."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from toolchain.build.abi import BuiltAgainst
from toolchain.core.redact import redact_text
from toolchain.recipe.load import Recipe
from toolchain.resolve.abi import Compiled, check_built_against
from toolchain.resolve.closure import Closure
from toolchain.resolve.uvpin import BuiltWheel, resolve_closure
from toolchain.target.facts import TargetInfo

RESOLVE_DIR = "resolve"  # under the cache directory: uv's cache


def resolve_built(recipe: Recipe, target: TargetInfo, built: Sequence[tuple[str, Path, tuple[BuiltAgainst, ...]]],
                  cache_dir: Path, log_dir: Path, ui) -> Closure:
    """Resolve the closure of `built` [(component, wheel, built-against)] and check it against what each
    compiled component was built against. Raises ResolveError or ABIMismatch (exit 1)."""
    wheels = [BuiltWheel(name, wheel) for name, wheel, _ in built]
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    spec = recipe.resolve
    where = redact_text(", ".join([*spec.indexes, *spec.find_links])) or "no index"
    with ui.status(f"resolving the runtime closure ({where})"):
        closure = resolve_closure(spec, target, wheels, Path(cache_dir) / RESOLVE_DIR, log_dir / "resolve.log", ui)
    check_built_against([Compiled(name, against) for name, _, against in built if against], closure,
                        {w.dist: w.version for w in wheels})
    for note in closure.notes:
        ui.warn(note)
    ui.info(f"  [green]✓[/] closure: {len(closure.dists)} dependenc{'y' if len(closure.dists) == 1 else 'ies'} "
            f"pinned with sha256 by {closure.resolver} in {time.monotonic() - started:.2f}s")
    return closure
