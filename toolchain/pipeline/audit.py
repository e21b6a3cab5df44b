"""The native audit of a lock's wheels and of its closure's: a verdict on each soname they need."""

from __future__ import annotations

from pathlib import Path

from toolchain.build.cache import WHEELS_DIR
from toolchain.console import UI
from toolchain.core.fs import atomic_write_text
from toolchain.core.record import replace
from toolchain.lock import Lock
from toolchain.recipe.model import Recipe
from toolchain.resolve.closure import DEPS_DIR
from toolchain.resolve.native import WheelAudit
from toolchain.target import make_runtime, memo_dir
from toolchain.target.oneapi import ToolchainEnv


def audit_native(lock: Lock, out: Path, recipe: Recipe, toolchain: ToolchainEnv | None, cache_dir: Path,
                 ui: UI, *, read_deps: bool = False) -> tuple[WheelAudit, ...]:
    """The native audit of the built and prebuilt wheels of `lock` (their ELF objects; cached by sha256) and of
    the closure's (their file lists, read from the zip central directory; with `read_deps` their objects too,
    fetched), then a verdict on each needed soname (toolchain.resolve.verdicts, the shipped policy with the
    recipe's [native]): provided by the lock, setvars' library path (`toolchain`: the captured setvars
    environment; None: not sourced) or the base image; expected from the run host (recorded per wheel as
    host-provides); or missing. Raises NativeABIError for a missing soname an extension module of a component
    loads (at most 10 lines; all of it in logs/native.log); warns of the others and of compiler stamps other
    than the captured oneAPI's."""
    from toolchain.resolve import native, verdicts
    from toolchain.resolve.policy import policy_for

    built = [(out / WHEELS_DIR / c.wheel.file, c.wheel.sha256, f"{c.dist or c.name} {c.version}",
              "prebuilt" if c.prebuilt else "built") for c in lock.components]
    deps = lock.closure.dists if lock.closure is not None else ()
    with ui.status(f"auditing the shared libraries of {len(built) + len(deps)} wheels"):
        audits = native.audit_wheels(built, deps, cache_dir, out / DEPS_DIR, out / "logs" / "native-fetch.log",
                                     read_deps=read_deps)
    if not any(a.objects for a in audits):
        return tuple(audits)
    for line in verdicts.build_machine_paths(audits, _interpreter_prefixes(recipe)):
        ui.warn(line)
    if lock.closure is None and lock.base is None:
        ui.warn("the lock pins no closure (--no-resolve): the sonames its wheels need are recorded, not checked "
                "(`toolchain lock --lock LOCK` resolves and checks them)")
        return tuple(audits)
    dirs = native.library_dirs(toolchain.as_dict()) if toolchain is not None else []
    with make_runtime(recipe.target, ui) as runtime:
        providers = native.target_providers(runtime, recipe.target.python, dirs,
                                            lock.toolchain.oneapi_version if toolchain is not None else "",
                                            installed=lock.base is not None,  # (the image's stack)
                                            memo_dir=memo_dir(recipe.target, cache_dir))
    policy = policy_for(recipe.native)
    report = verdicts.check(audits, providers, policy, at="build")
    log = out / "logs" / "native.log"
    atomic_write_text(log, verdicts.full_log(report, "the lock"))
    for stamp in report.stamps:
        ui.warn(stamp)
    verdicts.raise_for(report, "the lock", policy, log)
    for line in verdicts.capped([n.line() for n in report.warnings], log):
        ui.warn(line)
    host = report.of("host")
    if host:
        ui.info(f"native libraries: {len(report.of('provided'))} provided by the lock; "
                + verdicts.host_line(host))
    return verdicts.with_host_provides(audits, report)


def _interpreter_prefixes(recipe: Recipe) -> list[str]:
    """The prefix of the host interpreter that builds (its executable's folder's parent, links resolved, and
    that of the name as given): what a RUNPATH into it comes from. None for a container's (its own paths)."""
    import os
    import shutil

    if recipe.target.runtime not in ("", "host"):
        return []
    found = shutil.which(recipe.target.python) or recipe.target.python
    out = []
    for path in dict.fromkeys([found, os.path.realpath(found)]):
        parent = os.path.dirname(os.path.dirname(os.path.abspath(path)))
        if parent not in ("/", "/usr"):  # (a system interpreter's prefix holds every system library)
            out.append(parent)
    return out


def remembered_audit(lock: Lock, out: Path, recipe: Recipe, toolchain: ToolchainEnv | None, cache_dir: Path,
                     ui: UI) -> tuple[WheelAudit, ...]:
    """`audit_native` of `lock` (its native and host tables left out), remembered on the host like every probe:
    its identity is what it audits (the lock's every other value: wheels and closure by sha256, the recipe's
    [native], the toolchain) and the PATH its loader probe runs with; its inputs are every path the audit's
    verdicts read besides those (the loader cache, the system library folders, setvars' library folders, the
    shipped policy). A base image's or a container's audit is never remembered (their libraries are not here)."""
    memos = memo_dir(recipe.target, cache_dir)
    if lock.base is not None or memos is None:
        return audit_native(lock, out, recipe, toolchain, cache_dir, ui)
    import json
    import os

    from toolchain.core.fs import sha256_bytes
    from toolchain.core.probe_memo import remembered
    from toolchain.core.serial import Data, from_data, to_table
    from toolchain.lock import to_dict

    bare = to_dict(replace(lock, native=(), host={}))
    identity = {"lock": sha256_bytes(json.dumps(bare, sort_keys=True, default=str).encode()),
                "sourced": toolchain is not None, "path": os.environ.get("PATH", "")}

    def compute() -> tuple[list[dict[str, Data]], list[str]]:
        from toolchain.resolve import native
        from toolchain.resolve.policy import POLICY_FILE

        audits = audit_native(lock, out, recipe, toolchain, cache_dir, ui)
        dirs = native.library_dirs(toolchain.as_dict()) if toolchain is not None else []
        return ([to_table(a) for a in audits],
                [native.LOADER_CACHE, *native.SYSTEM_LIB_DIRS, *dirs, str(POLICY_FILE)])

    found = remembered(memos, "native-audit", identity, compute)
    return tuple(from_data(WheelAudit, d) for d in found)


def audit_closure(lock: Lock, cache_dir: Path, ui: UI) -> None:
    """Where the closure's files were fetched anyway (a bundle made --with-deps): their own shared objects are
    read and each soname they need gets a verdict (the lock's recorded policy); a missing one is a warning,
    listed once (nothing a component builds loads them at import), all of it in logs/native-closure.log."""
    from toolchain.resolve import native, verdicts
    from toolchain.resolve.policy import policy_of_recipe_text

    if lock.closure is None or lock.path is None:
        return
    out = lock.path.parent
    built = [(out / WHEELS_DIR / c.wheel.file, c.wheel.sha256, f"{c.dist or c.name} {c.version}",
              "prebuilt" if c.prebuilt else "built") for c in lock.components]
    audits = native.audit_wheels(built, lock.closure.dists, cache_dir, out / DEPS_DIR,
                                 out / "logs" / "native-fetch.log")
    deps = [a for a in audits if a.role == "dependency"]
    report = verdicts.check(audits, native.Providers(), policy_of_recipe_text(lock.recipe_text), at="build")
    mine = {a.dist or a.wheel for a in deps}
    warnings = [n for n in report.warnings if set(n.wheels) <= mine]
    log = out / "logs" / "native-closure.log"
    atomic_write_text(log, verdicts.full_log(report, "the closure's own objects"))
    for line in verdicts.capped([n.line() for n in warnings], log):
        ui.warn(line)
    ui.info(f"native libraries of the closure: {sum(len(a.objects) for a in deps)} shared object(s) in "
            f"{len(deps)} wheel(s) read, {len(warnings)} soname(s) missing (log: {log})")
