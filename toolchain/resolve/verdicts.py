"""One verdict per needed soname (docs/DESIGN.md, "The native audit's policy"):

- **provided**: a file of the lock has it (a built or prebuilt wheel, the closure), setvars' library path at
  build, or, over a base image, a distribution installed in the image;
- **host**: expected from the run host (the policy's GPU driver, base system and fabric groups, the recipe's
  `[native] host-provides`, or at build a library the build target's loader path has that no rule names).
  Recorded in the lock per wheel (`host-provides`), never fatal at build; where the stack runs (smoke, `toolchain
  doctor --lock`) each is looked up, and an absent one is **host-absent**;
- **missing**: none of those;
- **ignored**: the recipe's `[native] ignore`.

A missing (or, where the stack runs, absent) soname is an error only when an object loaded as the wheel is used
needs it: an extension module of a built or prebuilt component, or a library of that wheel such a module needs
(DT_NEEDED followed through the wheel's own libraries, RUNPATH/RPATH `$ORIGIN` first). Otherwise (a plugin
nothing loads at import, the closure's own objects) it is a warning, listed once per soname."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Literal

from toolchain.core.record import record, replace
from toolchain.core.regex import Regex
from toolchain.errors import BuildError
from toolchain.resolve.native import INTEL_COMPILER, Providers, SharedObject, WheelAudit
from toolchain.resolve.policy import Policy, example_list

SHOWN = 10  # lines of a listing; the rest are in the log
EXTENSION = Regex(r"^(?!lib)[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_-]+)?\.so$")  # _C.abi3.so, _C.cpython-311-…so
SONAME = Regex(r"^.+\.so\.\d+$")  # a name the loader asks for: libsycl.so.8, not libsycl.so.8.0.0
SOVERSION = Regex(r"^(?P<stem>.+?\.so)(?:\.[\d.]+)?$")
Verdict = Literal["provided", "host", "host-absent", "missing", "ignored"]
At = Literal["build", "run"]


@record(kw_only=True)
class Need:
    """One soname the stack's shared objects need, where it comes from, and whether its absence is fatal."""
    soname: str
    verdict: Verdict
    fatal: bool                     # loaded as a component's wheel is used, and not there
    files: tuple[str, ...]          # "dist: path" of each object that needs it
    wheels: tuple[str, ...]         # the distributions of those files
    source: str = ""                # who provides it (provided), the host group or where it was found (host)
    near: tuple[str, ...] = ()      # what is there under the same stem ("the closure's intel-sycl-rt 2025.3.3
    # has libsycl.so.8")
    ships: str = ""                 # who ships it (the policy), "" when no rule names it

    def line(self) -> str:
        """One line: the soname, how many files need it in which wheels, what is near, who ships it."""
        count = f"{len(self.files)} file{'s' if len(self.files) != 1 else ''}"
        said = [f"{self.soname}: {_VERDICT_WORDS[self.verdict]}; needed by {count} in "
                f"{', '.join(self.wheels)}"]
        if self.verdict in ("provided", "host") and self.source:
            said.append(self.source)
        said += self.near
        if self.ships and self.verdict != "provided":
            said.append(f"{'brought' if self.verdict.startswith('host') else 'shipped'} by {self.ships}")
        return "; ".join(said)


_VERDICT_WORDS = {"provided": "provided", "host": "expected from the run host", "host-absent":
                  "expected from the run host, absent here", "missing": "missing", "ignored": "ignored"}


@record
class NativeReport:
    """The native audit of a stack: every needed soname with its verdict, and unexpected compiler stamps."""
    needs: tuple[Need, ...] = ()
    stamps: tuple[str, ...] = ()    # compiler stamps other than the captured oneAPI's (warnings)

    @property
    def errors(self) -> tuple[Need, ...]:
        """The needs that fail the audit: loaded when a wheel is used, and found nowhere."""
        return tuple(n for n in self.needs if n.fatal)

    @property
    def warnings(self) -> tuple[Need, ...]:
        """The needs missing or absent from the host that are not fatal (warned about)."""
        return tuple(n for n in self.needs if not n.fatal and n.verdict in ("missing", "host-absent"))

    def of(self, verdict: Verdict) -> tuple[Need, ...]:
        """The needs with verdict `verdict`."""
        return tuple(n for n in self.needs if n.verdict == verdict)

    def need(self, soname: str) -> Need:
        """The verdict on `soname` (KeyError: no audited object needs it)."""
        found = next((n for n in self.needs if n.soname == soname), None)
        if found is None:
            raise KeyError(soname)
        return found


def is_extension(path: str) -> bool:
    """A Python extension module (what an import loads): `name.so`, `name.abi3.so`, `name.cpython-…so`, not
    `libname.so` and not under a wheel's `.data/` folder."""
    return EXTENSION.match(PurePosixPath(path).name) is not None and ".data/" not in path


def loaded_objects(audit: WheelAudit) -> set[str]:
    """The paths of `audit`'s objects loaded when its extension modules are imported: the modules and, through
    DT_NEEDED, the wheel's own libraries they need (one in a RUNPATH/RPATH `$ORIGIN` folder or beside the
    needing object first, else any of that name in the wheel)."""
    by_name: dict[str, list[SharedObject]] = {}
    for o in audit.objects:
        for name in {PurePosixPath(o.path).name, o.soname} - {""}:
            by_name.setdefault(name, []).append(o)
    todo = [o for o in audit.objects if is_extension(o.path)]
    seen = {o.path for o in todo}
    while todo:
        obj = todo.pop()
        here = posixpath.dirname(obj.path)
        dirs = [posixpath.normpath(d.replace("$ORIGIN", here).replace("${ORIGIN}", here))
                for d in obj.runpath if "$ORIGIN" in d or "${ORIGIN}" in d] + [here]
        for so in obj.needed:
            found = by_name.get(so, [])
            pick = next((o for d in dirs for o in found if posixpath.dirname(o.path) == d), found[0] if found else None)
            if pick is not None and pick.path not in seen:
                seen.add(pick.path)
                todo.append(pick)
    return seen


def check(audits: Sequence[WheelAudit], providers: Providers, policy: Policy, *, at: At) -> NativeReport:
    """The verdict on every soname the audited objects need. `at`: "build" (the lock is being written: the
    host's libraries are expected, not looked up; the build target's loader path marks one the policy does not
    name as expected from the run host) or "run" (smoke's target: each host library is looked up in its loader
    path)."""
    provided: dict[str, str] = {}
    for a in audits:
        name = f"the closure's {a.dist or a.wheel}" if a.role == "dependency" else a.dist or a.wheel
        for so in sorted(a.provides()):
            provided.setdefault(so, name)
    for so, where in providers.oneapi.items():
        provided.setdefault(so, f"setvars' library path ({where})")
    for so, dist in providers.installed.items():
        provided.setdefault(so, f"the target's installed {dist}")
    users: dict[str, list[tuple[WheelAudit, SharedObject, bool]]] = {}
    for a in audits:
        loaded = loaded_objects(a) if a.role != "dependency" else set()
        for obj in a.objects:
            for so in dict.fromkeys(obj.needed):
                users.setdefault(so, []).append((a, obj, obj.path in loaded))
    needs = []
    for so in sorted(users):
        who = users[so]
        files = tuple(f"{a.dist or a.wheel}: {o.path}" for a, o, _ in who)
        wheels = tuple(dict.fromkeys(a.dist or a.wheel for a, _, _ in who))
        is_loaded = any(flag for _, _, flag in who)
        verdict, source = _verdict(so, provided, providers, policy, at)
        fatal = is_loaded and verdict in ("missing", "host-absent")
        near = _near(so, provided, providers) if verdict in ("missing", "host-absent") else ()
        from_host = verdict in ("host", "host-absent")
        shipper = (policy.host_package(so) if from_host else None) or policy.shipper(so)
        ships = "" if shipper is None else shipper.by + (f" (apt install {shipper.debian})"
                                                          if from_host and shipper.debian else "")
        needs.append(Need(soname=so, verdict=verdict, fatal=fatal, files=files, wheels=wheels, source=source,
                          near=near, ships=ships))
    stamps = tuple(s for a in audits if a.role != "dependency" for s in [_stamp_mismatch(a, providers.oneapi_version)]
                   if s)
    return NativeReport(tuple(needs), stamps)


def _verdict(so: str, provided: Mapping[str, str], providers: Providers, policy: Policy,
             at: At) -> tuple[Verdict, str]:
    if policy.ignored(so):
        return "ignored", "the recipe's [native] ignore"
    if so in provided:
        return "provided", f"provided by {provided[so]}"
    group = policy.host_group(so)
    found = providers.system.get(so, "")
    if at == "run":
        if found:
            return "host", f"the target has it ({found})"
        return ("host-absent", f"from {group.what}") if group is not None else ("missing", "")
    if group is not None:
        return "host", f"from {group.what}"
    if found:
        return "host", f"the build target's loader path has it ({found})"
    return "missing", ""


def _stem(soname: str) -> str:
    m = SOVERSION.match(soname)
    return m.group("stem") if m else soname


def _near(so: str, provided: Mapping[str, str], providers: Providers) -> tuple[str, ...]:
    """What is there under the same library stem (libsycl.so.8 beside a needed libsycl.so.9)."""
    stem = _stem(so)
    said = [f"{who} has {have}" for have, who in sorted(provided.items())
            if have != so and _stem(have) == stem and SONAME.match(have)]
    said += [f"the target's loader path has {have}" for have in sorted(providers.system)
             if have != so and _stem(have) == stem and SONAME.match(have)]
    return tuple(said[:2])


def _stamp_mismatch(a: WheelAudit, oneapi_version: str) -> str:
    want = ".".join(oneapi_version.split(".")[:2])
    if not want:
        return ""
    for obj in a.objects:
        for stamp in obj.compilers:
            m = INTEL_COMPILER.search(stamp)
            if m and m.group(1) != want:
                return (f"{a.dist or a.wheel}: {obj.path} was compiled by `{stamp}`, the captured oneAPI is "
                        f"{oneapi_version}: its runtime libraries may not match (libsycl.so.8 is 2025.x, "
                        f".9 2026.x)")
    return ""


def with_host_provides(audits: Sequence[WheelAudit], report: NativeReport) -> tuple[WheelAudit, ...]:
    """`audits` with each wheel's `host-provides`: the sonames its objects need that the run host is expected
    to provide."""
    host = {n.soname for n in report.of("host")}
    return tuple(replace(a, host_provides=tuple(sorted({so for o in a.objects for so in o.needed} & host)))
                 for a in audits)


def capped(lines: Sequence[str], log: Path | None, limit: int = SHOWN) -> list[str]:
    """At most `limit` lines, then "and N more" naming the log that has them all."""
    if len(lines) <= limit:
        return list(lines)
    rest = len(lines) - (limit - 1)
    return [*lines[:limit - 1], f"and {rest} more" + (f" (all in {log})" if log else "")]


def listing(report: NativeReport) -> list[str]:
    """The report, one line per soname: errors, warnings, then one line for what the run host is expected to
    provide."""
    lines = [n.line() for n in report.errors] + [n.line() for n in report.warnings]
    host = report.of("host")
    if host:
        lines.append(host_line(host))
    return lines


def host_line(host: Sequence[Need]) -> str:
    """One line naming the sonames the run host must provide, the most needed first."""
    first = sorted(host, key=lambda n: (_HOST_ORDER.get(n.source, 9), -len(n.files), n.soname))
    names = ", ".join(f"{n.soname} ({n.source.removeprefix('from ')})" if i < 3 else n.soname
                      for i, n in enumerate(first[:8]))
    more = f" and {len(first) - 8} more" if len(first) > 8 else ""
    return f"expected from the run host ({len(host)}, recorded in the lock as host-provides): {names}{more}"


_HOST_ORDER = {"from the GPU driver": 0, "from the cluster fabric": 1}


def full_log(report: NativeReport, where: str) -> str:
    """Every soname with its verdict and every file that needs it: what the log keeps."""
    out = [f"native audit of {where}: {len(report.needs)} needed sonames"]
    for n in report.needs:
        out.append(f"{n.soname}: {n.verdict}{' (fatal)' if n.fatal else ''}"
                   + (f"; {n.source}" if n.source else "") + "".join(f"; {x}" for x in n.near)
                   + (f"; shipped by {n.ships}" if n.ships else ""))
        out += [f"    {f}" for f in n.files]
    out += [f"compiler stamp: {s}" for s in report.stamps]
    return "\n".join(out) + "\n"


class NativeABIError(BuildError):
    """A needed shared library that nothing the target would load provides."""


def fix_for(errors: Sequence[Need], policy: Policy) -> str:
    """The recipe keys that answer `errors`, with an example that works."""
    pins: dict[str, list[str]] = {}
    for n in errors:
        shipper = policy.wheel_shipper(n.soname)
        if shipper is not None and n.verdict == "missing":
            pins.setdefault(shipper.fix(), []).append(n.soname)
    said = [f"pin what ships {', '.join(names[:3])}{' …' if len(names) > 3 else ''}: {fix}"
            for fix, names in list(pins.items())[:3]]
    absent = [n.soname for n in errors if n.verdict == "host-absent"]
    if absent:
        pkgs = dict.fromkeys(s.debian for so in absent for s in [policy.host_package(so)] if s is not None)
        said.append(f"install on this host what brings {', '.join(absent[:3])}"
                    + (f" (apt install {' '.join(pkgs)})" if pkgs else ""))
    missing = [n.soname for n in errors if n.verdict == "missing"]
    names = [so for so in missing if policy.wheel_shipper(so) is None] or missing  # a wheel's soname: pin it
    if names:
        said.append(f"where the run host provides one: [native] host-provides = {example_list(names)}; to skip one: "
                    f"[native] ignore = {example_list(names, 1)}")
    return "; ".join(said) or "rebuild the wheel against the runtime the closure has"


def raise_for(report: NativeReport, where: str, policy: Policy, log: Path | None) -> None:
    """NativeABIError listing (at most 10 lines) the fatal sonames, then the rest of the report."""
    errors = report.errors
    if not errors:
        return
    lines = capped(listing(report), log)
    raise NativeABIError(f"native ABI check of {where}: {len(errors)} needed librar"
                         f"{'y is' if len(errors) == 1 else 'ies are'} not there for what loads "
                         f"{'it' if len(errors) == 1 else 'them'}:\n"
                         + "\n".join(f"  {'' if x.startswith('and ') else '- '}{x}" for x in lines),
                         hint=fix_for(errors, policy))


def build_machine_paths(audits: Sequence[WheelAudit], prefixes: Sequence[str]) -> list[str]:
    """One line per shared object of a built wheel whose RUNPATH/RPATH names an absolute folder (not `$ORIGIN`):
    a path of the machine that built it, which names nothing, or another library, where the wheel runs. One
    under `prefixes` (the build interpreter's prefix) says so: the build leaves the interpreter's own `LDSHARED`
    rpath out (build/intarget.py `link_env`), so one there comes from an LDSHARED or LDFLAGS the recipe or the
    user's environment sets, or from the build itself."""
    out = []
    for a in audits:
        if a.role != "built":
            continue
        for obj in a.objects:
            for d in obj.runpath:
                if not d.startswith("/"):
                    continue
                under = next((p for p in prefixes if p and (d == p or d.startswith(p.rstrip("/") + "/"))), "")
                why = (f"the build interpreter's prefix {under} (from an LDSHARED or LDFLAGS the recipe or environment "
                       "sets, or the build itself)" if under
                       else "a folder of the build machine")
                out.append(f"{a.wheel}: {obj.path} has RUNPATH {d}, {why}: where the wheel runs it names nothing "
                           "or another library there; the loader looks there first")
    return out

