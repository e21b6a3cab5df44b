"""Pinning a prebuilt component's `dist==version` to one file: the wheel pip would install on the target, from
the recipe's [resolve] indexes and find-links, with its URL and sha256 (`uv pip compile --no-deps`, the
resolver the closure uses, so indexes, find-links, the index strategy and the target's tags mean the same)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from toolchain.build.prebuilt import PrebuiltFile
from toolchain.core import toml as tomlio
from toolchain.core.proc import CommandFailed, run
from toolchain.recipe.model import ResolveSpec
from toolchain.resolve import uvpin
from toolchain.resolve.failure import raise_classified
from toolchain.resolve.memo import expand_link, target_platform, target_python
from toolchain.target.facts import TargetInfo


def pin_requirement(requirement: str, spec: ResolveSpec, target: TargetInfo, cache_dir: Path, log: Path,
                    what: str) -> PrebuiltFile:
    """The one wheel of `requirement` (an exact pin) for the target; ResolveError (exit 1) naming the
    requirement and where it was looked for when there is none."""
    recorded_links = tuple(spec.find_links)
    spec = dataclasses.replace(spec, find_links=tuple(expand_link(link) for link in spec.find_links))
    where = ", ".join([*spec.indexes, *recorded_links]) or "nothing ([resolve] names no index and no find-links)"
    python, platform = target_python(spec, target), target_platform(spec, target)
    uv = uvpin.uv_binary()
    with tempfile.TemporaryDirectory(prefix="toolchain-prebuilt-") as tmp:
        reqs, out = Path(tmp) / "prebuilt.txt", Path(tmp) / "pylock.toml"
        reqs.write_text(requirement + "\n")
        argv = [*uvpin._argv(uv, spec, python, platform, cache_dir), "--no-deps", str(reqs),
                "--format", "pylock.toml", "-o", str(out)]
        try:
            run(argv, env=uvpin._uv_env(), log=log, timeout=uvpin.RESOLVE_TIMEOUT)
        except CommandFailed as exc:
            raise_classified(exc.tail, what=f"pinning the prebuilt {requirement}", log=log,
                             disk_fallback=str(cache_dir))
            raise uvpin.ResolveError(f"{what}: prebuilt {requirement!r} is not served by {where} for Python "
                                     f"{python} on {platform}\n  resolver said:\n"
                                     + "\n".join("    " + line for line in exc.tail.strip().splitlines()[-6:]),
                                     hint=f"check the version, or add the index or find-links that serves it to "
                                          f"[resolve]; or pin one file: prebuilt = {{ url = ..., sha256 = ... }} "
                                          f"(log: {log})") from None
        packages = tomlio.load_file(out).get("packages", [])
    recorded = {(Path(x).as_uri() if "://" not in x else x).rstrip("/"): r
                for x, r in zip(spec.find_links, recorded_links, strict=False)}
    tags = uvpin.supported_tags(python, platform)
    for pkg in packages:
        dist = uvpin._pick(pkg, tags, python, platform, (), "", spec, recorded)
        if not dist.is_wheel:
            raise uvpin.ResolveError(f"{what}: prebuilt {requirement!r}: {where} has no wheel for Python {python} "
                                     f"on {platform}, only the source {dist.file}",
                                     hint="a prebuilt component is a wheel; build it from source instead "
                                          "(url and commit), or set [resolve] platform / python-version")
        return PrebuiltFile(dist.file, dist.url, dist.sha256, dist.size, requirement, dist.index)
    raise uvpin.ResolveError(f"{what}: prebuilt {requirement!r}: the resolver returned no file", hint=f"log: {log}")
