"""The closure of an overlay (`[target] base`): the components are installed over an image with
`--force-reinstall --no-deps`, so the image IS their runtime environment. Nothing is resolved from an index:
every requirement of a rebuilt wheel must be met by the image or by another rebuilt wheel, and each component
`built-against` a distribution is checked against the image's build of it (the ABI check)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from toolchain.build.built_against import BuiltAgainst
from toolchain.resolve.closure import Closure
from toolchain.resolve.torch_abi import Compiled, check_built_against
from toolchain.resolve.uvpin import ResolveError
from toolchain.resolve.uvpin import _requirements as wheel_requirements
from toolchain.target.baseenv import BaseEnv


def overlay_closure(base: BaseEnv, built: Sequence[tuple[str, Path, tuple[BuiltAgainst, ...]]]) -> Closure:
    """The empty closure of rebuilt wheels over `base` (notes: requirements met by a rebuilt wheel of another
    version, taken as given). Raises ResolveError naming each requirement the image does not meet, and
    ABIMismatch when a component was built against another build than the image holds."""
    python = ".".join(base.python_version.split(".")[:2]) or "3"
    env = {"python_version": python, "python_full_version": base.python_version or python, "extra": ""}
    versions = {str(canonicalize_name(parse_wheel_filename(w.name)[0])): str(parse_wheel_filename(w.name)[1])
                for _, w, _ in built}
    image = {d.name: d.version for d in base.dists}
    problems, notes = [], []
    for component, wheel, _ in built:
        for req in wheel_requirements(wheel):
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            name = str(canonicalize_name(req.name))
            if name in versions:
                if req.specifier and not req.specifier.contains(Version(versions[name]), prereleases=True):
                    notes.append(f"{component} requires {req}; the overlay has the rebuilt {name} {versions[name]}, "
                                 f"taken as given")
                continue
            have = image.get(name)
            if have is None:
                problems.append(f"{component} requires {req}, which the base image does not hold")
            elif req.specifier and not req.specifier.contains(Version(have), prereleases=True):
                problems.append(f"{component} requires {req}; the base image holds {name} {have}")
    if problems:
        raise ResolveError(f"the rebuilt components do not fit the base image {base.image}: " + "; ".join(problems),
                           hint="nothing is resolved from an index over a base: rebuild at a commit that fits the "
                                "image, patch the requirement, or pick an image that holds it")
    check_built_against([Compiled(name, against) for name, _, against in built if against],
                        Closure(resolver="", indexes=(), find_links=(), index_strategy="", python_version=python,
                                platform="", dists=()), {**image, **versions})
    return Closure(resolver=f"the base image {base.image}", indexes=(), find_links=(), index_strategy="",
                   python_version=python, platform="", dists=(), notes=tuple(notes))

