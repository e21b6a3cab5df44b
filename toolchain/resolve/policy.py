"""The native audit's policy: which sonames the run host is expected to provide (the GPU driver, the base
system, a cluster fabric) and who ships a soname (a wheel to pin, a distribution package of the run host).
The shipped policy is toolchain/data/native-policy.toml; a recipe adds to it with `[native] host-provides`
and `ignore` (recipe.model.NativeSpec). Names are fnmatch patterns."""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import Path

from toolchain.core.record import record
from toolchain.recipe.model import NativeSpec

POLICY_FILE = Path(__file__).resolve().parents[1] / "data" / "native-policy.toml"
RECIPE_GROUP = "the recipe's [native] host-provides"


@record
class HostGroup:
    """A group of sonames the run host provides (the GPU driver, the base system, ...)."""
    name: str                  # gpu-driver | base-system | fabric | recipe
    what: str                  # "the GPU driver"
    sonames: tuple[str, ...]   # patterns


@record
class Shipper:
    """Who ships the sonames matching `sonames`."""
    sonames: tuple[str, ...]
    by: str                    # "intel-sycl-rt 2026.x (oneAPI 2026)"
    pin: str = ""              # the exact wheel to pin: "intel-sycl-rt==2026.2.0"
    index: str = ""            # the index serving it, when not the default one
    debian: str = ""           # the Debian/Ubuntu package of a run host

    def matches(self, soname: str) -> bool:
        """Whether `soname` is one of the libraries this wheel ships."""
        return any(fnmatchcase(soname, p) for p in self.sonames)

    def fix(self) -> str:
        """How to add it: the recipe keys for a wheel, the package for a run host."""
        if self.pin:
            name = self.pin.split("==")[0]
            fix = f'[components.{name}] prebuilt = "{self.pin}"'
            return fix + (f' with [resolve] indexes = ["{self.index}", "https://pypi.org/simple"]' if self.index else "")
        return f"on the run host: apt install {self.debian}" if self.debian else ""


@record
class Policy:
    """The native audit's policy: what the host provides, which wheels ship which libraries, what is ignored."""
    host: tuple[HostGroup, ...]
    ships: tuple[Shipper, ...]
    ignore: tuple[str, ...] = ()

    def host_group(self, soname: str) -> HostGroup | None:
        """The group of the run host expected to provide `soname`, None when no rule says so."""
        return next((g for g in self.host if any(fnmatchcase(soname, p) for p in g.sonames)), None)

    def ignored(self, soname: str) -> bool:
        """Whether the audit skips `soname` (the shipped policy's or the recipe's ignore patterns)."""
        return any(fnmatchcase(soname, p) for p in self.ignore)

    def shipper(self, soname: str) -> Shipper | None:
        """The wheel known to ship `soname`, None when no rule names one."""
        return next((s for s in self.ships if s.matches(soname)), None)

    def wheel_shipper(self, soname: str) -> Shipper | None:
        """The first rule naming a wheel to pin for `soname`."""
        return next((s for s in self.ships if s.pin and s.matches(soname)), None)

    def host_package(self, soname: str) -> Shipper | None:
        """The first rule naming the run host's package for `soname`."""
        return next((s for s in self.ships if s.debian and s.matches(soname)), None)

    def with_recipe(self, spec: NativeSpec) -> Policy:
        """This policy with a recipe's `[native]` added (its host-provides first: the recipe's word wins)."""
        extra = (HostGroup("recipe", RECIPE_GROUP, spec.host_provides),) if spec.host_provides else ()
        return Policy(extra + self.host, self.ships, self.ignore + spec.ignore)


def _strs(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{POLICY_FILE}: {where} must be a list of strings")
    return tuple(value)


@functools.cache
def shipped_policy() -> Policy:
    """The shipped policy file, read once per process."""
    data = tomllib.loads(POLICY_FILE.read_text(encoding="utf-8"))
    host = tuple(HostGroup(name, str(g.get("what", name)), _strs(g.get("sonames"), f"host.{name}.sonames"))
                 for name, g in dict(data.get("host", {})).items())
    ships = tuple(Shipper(_strs(s.get("sonames"), "ships.sonames"), str(s.get("by", "")), str(s.get("pin", "")),
                          str(s.get("index", "")), str(s.get("debian", ""))) for s in data.get("ships", ()))
    return Policy(host, ships)


def policy_for(spec: NativeSpec | None) -> Policy:
    """The shipped native policy with the recipe's [native] additions."""
    return shipped_policy().with_recipe(spec) if spec is not None else shipped_policy()


def policy_of_recipe_text(text: str) -> Policy:
    """The policy with the `[native]` table of a lock's recorded recipe text (validated when it was built)."""
    try:
        table = tomllib.loads(text).get("native", {}) if text else {}
    except tomllib.TOMLDecodeError:
        table = {}
    if not isinstance(table, dict):
        return shipped_policy()

    def names(key: str) -> tuple[str, ...]:
        value = table.get(key, [])
        return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()

    return policy_for(NativeSpec(host_provides=names("host-provides"), ignore=names("ignore")))


def example_list(names: Sequence[str], limit: int = 3) -> str:
    """`["a", "b"]` as a TOML array (at most `limit` names)."""
    return "[" + ", ".join(f'"{n}"' for n in list(names)[:limit]) + "]"
