"""Pinning a prebuilt component's `dist==version` to one file: the wheel pip would install on the target, from
the recipe's [resolve] indexes and find-links, with its URL and sha256 (`uv pip compile --no-deps`, the
resolver the closure uses, so indexes, find-links, the index strategy and the target's tags mean the same)."""

from __future__ import annotations

from pathlib import Path

from toolchain.build.prebuilt_wheels import PrebuiltFile
from toolchain.core.proc.runner import CommandFailed
from toolchain.recipe.model import ResolveSpec
from toolchain.resolve import uvpin
from toolchain.resolve.closure_memo import target_platform, target_python
from toolchain.resolve.failure import raise_classified
from toolchain.target.facts import TargetInfo


def pin_requirement(requirement: str, spec: ResolveSpec, target: TargetInfo, cache_dir: Path, log: Path,
                    what: str) -> PrebuiltFile:
    """The one wheel of `requirement` (an exact pin) for the target; ResolveError (exit 1) naming the
    requirement and where it was looked for when there is none."""
    where = ", ".join([*spec.indexes, *spec.find_links]) or "nothing ([resolve] names no index and no find-links)"
    python, platform = target_python(spec, target), target_platform(spec, target)
    try:
        found = uvpin.pin_files(requirement, spec, target, cache_dir, log)
    except CommandFailed as exc:
        raise_classified(exc.tail, what=f"pinning the prebuilt {requirement}", log=log, disk_fallback=str(cache_dir))
        raise uvpin.ResolveError(f"{what}: prebuilt {requirement!r} is not served by {where} for Python "
                                 f"{python} on {platform}\n  resolver said:\n"
                                 + "\n".join("    " + line for line in exc.tail.strip().splitlines()[-6:]),
                                 hint=f"check the version, or add the index or find-links that serves it to "
                                      f"[resolve]; or pin one file: prebuilt = {{ url = ..., sha256 = ... }} "
                                      f"(log: {log})") from None
    for dist in found:
        if not dist.is_wheel:
            raise uvpin.ResolveError(f"{what}: prebuilt {requirement!r}: {where} has no wheel for Python {python} "
                                     f"on {platform}, only the source {dist.file}",
                                     hint="a prebuilt component is a wheel; build it from source instead "
                                          "(url and commit), or set [resolve] platform / python-version")
        return PrebuiltFile(dist.file, dist.url, dist.sha256, dist.size, requirement, dist.index)
    raise uvpin.ResolveError(f"{what}: prebuilt {requirement!r}: the resolver returned no file", hint=f"log: {log}")
