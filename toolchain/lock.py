"""The lock: `<out>/stack.lock.toml` (what was built, exactly) and `<out>/pylock.toml` (PEP 751).

A lock is read back into a frozen `Lock`; every recorded hash is checked before a lock is trusted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain import __version__
from toolchain.build.cache import WHEELS_DIR, WheelRef
from toolchain.build.ccache import CacheReport
from toolchain.build.metrics import BuildMetrics
from toolchain.core import toml as tomlio
from toolchain.core.fs import atomic_write_text, sha256_file
from toolchain.core.redact import redact_env
from toolchain.errors import RecipeError, TestFailed
from toolchain.recipe.model import Patch
from toolchain.sources.mirrors import DESCRIBE_RULE
from toolchain.target.facts import TargetInfo, ToolchainInfo

if TYPE_CHECKING:
    from toolchain.build.plan import Plan
    from toolchain.build.stack import BuiltComponent

LOCK_NAME = "stack.lock.toml"
PYLOCK_NAME = "pylock.toml"
LOCK_VERSION = 1


@dataclass(frozen=True)
class LockedComponent:
    name: str
    url: str
    ref: str
    commit: str
    describe: str
    subdir: str
    after: tuple[str, ...]
    dist: str
    import_name: str
    version: str
    install_args: tuple[str, ...]
    patches: tuple[Patch, ...]
    env: dict[str, str]
    command: tuple[str, ...]
    cache_key: str
    build_seconds: float
    wheel: WheelRef
    fetchcontent: tuple[dict[str, str], ...] = ()
    # what the build that made the wheel cost (facts of that build, not inputs: a bundle drops them)
    compiler_cache: CacheReport = CacheReport()
    jobs: int = 0
    jobs_source: str = ""
    metrics: BuildMetrics = BuildMetrics()


@dataclass(frozen=True)
class Lock:
    recipe_name: str
    recipe_path: str
    recipe_sha256: str
    recipe_text: str
    toolchain: ToolchainInfo
    target: TargetInfo
    smoke: dict[str, Any]
    components: tuple[LockedComponent, ...]
    tool_version: str = __version__
    normalizations: tuple[str, ...] = ()
    describe_rule: str = DESCRIBE_RULE  # how `describe` (and the versions the builds derived) were computed
    path: Path | None = field(default=None, compare=False)

    @property
    def wheels_dir(self) -> Path:
        if self.path is None:
            raise ValueError("lock has no path")
        return self.path.parent / WHEELS_DIR

    def wheel_path(self, comp: LockedComponent) -> Path:
        return self.wheels_dir / comp.wheel.file

    def component(self, name: str) -> LockedComponent:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)


def to_dict(lock: Lock) -> dict[str, Any]:
    comps = []
    for c in lock.components:
        d = {
            "name": c.name, "url": c.url, "ref": c.ref, "commit": c.commit, "describe": c.describe,
            "subdir": c.subdir, "after": list(c.after), "dist": c.dist, "import": c.import_name,
            "version": c.version, "install-args": list(c.install_args),
            "patches": [patch_to_dict(p) for p in c.patches],
            "env": dict(sorted(c.env.items())), "command": list(c.command), "cache-key": c.cache_key,
            "build-seconds": round(c.build_seconds, 3),
            "wheel": {"file": c.wheel.file, "sha256": c.wheel.sha256, "size": c.wheel.size},
        }
        if c.fetchcontent:
            d["fetchcontent"] = [dict(f) for f in c.fetchcontent]
        if c.jobs:
            d["jobs"], d["jobs-source"] = c.jobs, c.jobs_source
        if c.compiler_cache != CacheReport():
            d["compiler-cache"] = c.compiler_cache.as_dict()
        if c.metrics != BuildMetrics():
            d["metrics"] = c.metrics.as_dict()
        comps.append(d)
    return {
        "lock-version": LOCK_VERSION,
        "tool-version": lock.tool_version,
        "normalizations": list(lock.normalizations),
        "describe-rule": lock.describe_rule,
        "recipe": {"name": lock.recipe_name, "path": lock.recipe_path, "sha256": lock.recipe_sha256,
                   "text": lock.recipe_text},
        "toolchain": _kebab(asdict(lock.toolchain)),
        "target": _kebab(asdict(lock.target)),
        "smoke": lock.smoke,
        "components": comps,
    }


def patch_to_dict(p: Patch) -> dict[str, str]:
    """A patch as a lock records it: its path (relative to patches/) and sha256; a remote one also its
    repository and commit."""
    return {"path": p.path, "url": p.url, "commit": p.commit, "sha256": p.sha256} if p.remote \
        else {"path": p.path, "sha256": p.sha256}


def patch_from_dict(d: dict[str, Any]) -> Patch:
    return Patch(d["path"], d["sha256"], url=d.get("url", ""), commit=d.get("commit", ""))


def _kebab(d: dict[str, Any]) -> dict[str, Any]:
    return {k.replace("_", "-"): (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}


def _snake(d: dict[str, Any]) -> dict[str, Any]:
    return {k.replace("-", "_"): (tuple(v) if isinstance(v, list) else v) for k, v in d.items()}


def write_lock(lock: Lock, out_dir: Path) -> Path:
    path = out_dir / LOCK_NAME
    atomic_write_text(path, "# Written by toolchain; do not edit (hashes are verified).\n"
                      + tomlio.dumps(to_dict(lock)))
    atomic_write_text(out_dir / PYLOCK_NAME, pylock_text(lock))
    return path


def pylock_text(lock: Lock) -> str:
    """PEP 751: the built wheels by relative path with sha256, in install order."""
    target = lock.target
    packages = []
    for c in lock.components:
        name, version = wheel_name_version(c.wheel.file)
        packages.append({
            "name": name, "version": version,
            "wheels": [{"name": c.wheel.file, "path": f"{WHEELS_DIR}/{c.wheel.file}", "size": c.wheel.size,
                        "hashes": {"sha256": c.wheel.sha256}}],
        })
    data: dict[str, Any] = {"lock-version": "1.0", "created-by": "toolchain"}
    if target.python_version:
        major_minor = ".".join(target.python_version.split(".")[:2])
        data["requires-python"] = f"=={major_minor}.*"
    data["packages"] = packages
    text = tomlio.dumps(data)
    return "# PEP 751 lock of the wheels built by toolchain (install order).\n" + text


def wheel_name_version(filename: str) -> tuple[str, str]:
    from packaging.utils import canonicalize_name, parse_wheel_filename

    name, version, _build, _tags = parse_wheel_filename(filename)
    return str(canonicalize_name(name)), str(version)


def read_lock(path: Path) -> Lock:
    path = Path(path)
    if path.is_dir():
        path = path / LOCK_NAME
    if not path.is_file():
        raise RecipeError(f"{path}: no such lock file", hint="pass the stack.lock.toml written by `toolchain build`")
    try:
        data = tomlio.load_file(path)
    except tomlio.TOMLDecodeError as exc:
        raise RecipeError(f"{path}: not valid TOML: {exc}") from None
    try:
        if data.get("lock-version") != LOCK_VERSION:
            raise RecipeError(f"{path}: lock-version {data.get('lock-version')!r} is not supported "
                              f"(this tool reads {LOCK_VERSION})")
        comps = []
        for c in data["components"]:
            comps.append(LockedComponent(
                name=c["name"], url=c["url"], ref=c.get("ref", ""), commit=c["commit"],
                describe=c.get("describe", ""), subdir=c.get("subdir", ""), after=tuple(c.get("after", ())),
                dist=c.get("dist", ""), import_name=c.get("import", ""), version=c.get("version", ""),
                install_args=tuple(c.get("install-args", ())),
                patches=tuple(patch_from_dict(p) for p in c.get("patches", ())),
                env=dict(c.get("env", {})), command=tuple(c["command"]), cache_key=c["cache-key"],
                build_seconds=float(c.get("build-seconds", 0.0)),
                wheel=WheelRef(c["wheel"]["file"], c["wheel"]["sha256"], int(c["wheel"]["size"])),
                fetchcontent=tuple(dict(f) for f in c.get("fetchcontent", ())),
                compiler_cache=CacheReport.from_dict(c.get("compiler-cache")),
                jobs=int(c.get("jobs", 0)), jobs_source=str(c.get("jobs-source", "")),
                metrics=BuildMetrics.from_dict(c.get("metrics")),
            ))
        r = data["recipe"]
        return Lock(
            recipe_name=r["name"], recipe_path=r.get("path", ""), recipe_sha256=r["sha256"],
            recipe_text=r.get("text", ""),
            toolchain=ToolchainInfo(**_snake(data.get("toolchain", {}))),
            target=TargetInfo(**_snake(data.get("target", {}))),
            smoke=dict(data.get("smoke", {})), components=tuple(comps),
            tool_version=data.get("tool-version", ""), normalizations=tuple(data.get("normalizations", ())),
            describe_rule=data.get("describe-rule", ""),
            path=path.resolve(),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RecipeError(f"{path}: malformed lock (missing or wrong key {exc})",
                          hint="locks are written by `toolchain build`; rebuild it") from None


def verify_wheels(lock: Lock) -> None:
    """Every wheel the lock names exists with the recorded size and sha256; raises TestFailed otherwise."""
    problems = []
    for c in lock.components:
        p = lock.wheel_path(c)
        if not p.is_file():
            problems.append(f"{c.name}: wheel {p} is missing")
            continue
        digest = sha256_file(p)
        if digest != c.wheel.sha256:
            problems.append(f"{c.name}: {p.name} has sha256 {digest}, the lock records {c.wheel.sha256}")
    if problems:
        raise TestFailed("wheels do not match the lock " + str(lock.path) + ":\n"
                         + "\n".join(f"  - {p}" for p in problems),
                         hint="rebuild with `toolchain build --from-lock` or fetch the bundle again")


def assemble_lock(plan: Plan, built: list[BuiltComponent]) -> Lock:
    """The lock of a plan's built components (install order)."""
    comps = []
    for b in built:
        c = b.plan.component
        comps.append(LockedComponent(
            name=c.name, url=c.url, ref=c.ref, commit=c.commit, describe=b.describe, subdir=c.subdir,
            after=c.after, dist=c.dist, import_name=c.import_name,
            version=wheel_name_version(b.wheel.file)[1], install_args=c.install_args,
            patches=b.plan.patches,
            env={k: v for k, v in redact_env(dict(b.plan.env)).items() if v is not None}, command=c.command, cache_key=b.plan.cache_key,
            build_seconds=b.seconds, wheel=b.wheel,
            fetchcontent=tuple({"name": d.name, "url": d.url, "commit": d.commit} for d in c.fetchcontent),
            compiler_cache=b.compiler_cache, jobs=b.jobs, jobs_source=b.jobs_source, metrics=b.metrics))
    norms = sorted({n for b in built for n in b.normalizations})
    return Lock(recipe_name=plan.recipe.name, recipe_path=str(plan.recipe.path), recipe_sha256=plan.recipe.sha256,
                recipe_text=plan.recipe.text, toolchain=plan.toolchain, target=plan.target,
                smoke=plan.recipe.smoke.raw, components=tuple(comps), normalizations=tuple(norms))
