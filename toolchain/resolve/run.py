"""The resolution step of the pipeline: built wheels (lock order) → checked closure."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from toolchain.build.built_against import BuiltAgainst
from toolchain.build.wheelmeta import WheelMeta, remembered_wheel_meta
from toolchain.console import UI
from toolchain.core.fs import file_lock
from toolchain.core.probe_memo import stat_key
from toolchain.core.proc.signals import STOPPING
from toolchain.core.redact import redact_text
from toolchain.errors import TransientError
from toolchain.recipe.load import Recipe
from toolchain.resolve.closure import Closure, canonical_name
from toolchain.resolve.closure_memo import ClosureMemo, closure_key, local_inputs
from toolchain.resolve.torch_abi import Compiled, check_built_against
from toolchain.target.facts import TargetInfo

RESOLVE_DIR = "resolve"  # under the cache directory: uv's cache


def resolve_built(recipe: Recipe, target: TargetInfo, built: Sequence[tuple[str, Path, tuple[BuiltAgainst, ...]]],
                  cache_dir: Path, log_dir: Path, ui: UI, *, refresh: bool = False,
                  view: IndexView | None = None) -> Closure:
    """The closure of `built` [(component, wheel, built-against)], checked against what each compiled component
    was built against. Resolved once per change: a closure kept under the same key (memo.py) is taken as it
    is, with no resolver run and no network, unless `refresh`. `view`: resolutions sharing one view of the
    indexes (`IndexView`). Raises ResolveError, TransientError (network,
    full disk) or ABIMismatch (exit 1)."""
    started = time.monotonic()
    spec = recipe.resolve
    resolve_cache = Path(cache_dir) / RESOLVE_DIR
    memo = ClosureMemo(resolve_cache)
    metas = [(name, remembered_wheel_meta(wheel, Path(cache_dir) / "memo")) for name, wheel, _ in built]
    key = closure_key(spec, target, metas)
    closure = None if refresh else memo.get(key)
    if closure is not None:
        return _checked(closure, built, metas, ui, how=_kept(closure))
    # one resolution of a key at a time (the ends and the first midpoint of a bisect build at once, mostly
    # with the same requirements): the others wait, then take what it kept
    with file_lock(memo.path(key).with_suffix(".lock")):
        closure = None if refresh else memo.get(key)
        if closure is not None:
            return _checked(closure, built, metas, ui, how=_kept(closure))
        if STOPPING.is_set():  # the one it waited for was stopped by a stop signal: none starts after it
            raise TransientError("resolving the closure was stopped", kind="interrupted",
                                 hint="run the command again (a bisect: resume it)")
        inputs = {p: stat_key(p) for p in local_inputs(spec)}  # (before the resolver reads them: a change while
        # it runs is a change the next build sees)
        from toolchain.resolve.uvpin import BuiltWheel, resolve_closure

        log_dir.mkdir(parents=True, exist_ok=True)
        where = redact_text(", ".join([*spec.indexes, *spec.find_links])) or "no index"
        def resolve(cached_first: bool) -> Closure:
            return resolve_closure(spec, target, [BuiltWheel(name, wheel) for name, wheel, _ in built],
                                   resolve_cache, log_dir / "resolve.log", ui, refresh=refresh,
                                   cached_first=cached_first,
                                   asked=view.mark_asked if view is not None and not cached_first else None)

        with ui.status(f"resolving the runtime closure ({where})"):
            closure = view.resolve(resolve) if view is not None and not refresh else resolve(False)
        _checked(closure, built, metas, ui, how=f"by {closure.resolver} in {time.monotonic() - started:.2f}s")
        memo.put(key, closure, inputs)  # only a closure that passed the check is kept
        return closure


class IndexView:
    """One view of the indexes for several resolutions (a bisect's locks): the first that has to ask them
    does so alone; the others wait for it, then resolve from uv's cache of what they served (uv --offline),
    asking them only for what it lacks (uvpin.resolve_closure's `cached_first`). Asking beside it would take
    as long as it does, and as much CPU: auto-round's ~70 packages revalidated, 7-14 s, against 0.6 s."""

    def __init__(self) -> None:
        self._asking = threading.Lock()
        self.asked = False  # a resolution of this view asked the indexes

    def mark_asked(self) -> None:
        """(The first resolution, once uv's cache holds what the indexes served it: before its second pass.)"""
        self.asked = True

    def resolve(self, resolve: Callable[[bool], Closure]) -> Closure:
        """`resolve(cached_first)`: the first call's False, held alone; then True."""
        if not self.asked:
            with self._asking:
                if not self.asked:
                    closure = resolve(False)
                    self.asked = True
                    return closure
        return resolve(True)


def _kept(closure: Closure) -> str:
    return (f"as resolved {closure.resolved_at or 'before'} by {closure.resolver} (kept: nothing it depends on "
            "changed; `toolchain lock --refresh` resolves again)")


def _checked(closure: Closure, built: Sequence[tuple[str, Path, tuple[BuiltAgainst, ...]]],
             metas: Sequence[tuple[str, WheelMeta]], ui: UI, *, how: str) -> Closure:
    """`closure`, once what each compiled component was built against is checked against it (ABIMismatch)."""
    check_built_against([Compiled(name, against) for name, _, against in built if against], closure,
                        {canonical_name(m.name): m.version for _, m in metas})
    for note in closure.notes:
        ui.warn(note)
    ui.info(f"  [green]✓[/] closure: {len(closure.dists)} dependenc{'y' if len(closure.dists) == 1 else 'ies'} "
            f"pinned with sha256 {how}")
    return closure

