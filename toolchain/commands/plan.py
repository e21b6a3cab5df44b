"""`toolchain plan`: the fully resolved plan (components, commits, patches, env, exact commands, cache keys);
builds nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolchain.build.plan import make_plan, plan_to_dict
from toolchain.commands import options
from toolchain.commands.options import cache_dir, recipe_from_args
from toolchain.commands.recipes import Table
from toolchain.console import CommandResult
from toolchain.target import make_runtime


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="show the fully resolved plan; builds nothing",
                       description="Show what `toolchain build` would do, exactly: each component's commit, "
                                   "patches with sha256, environment, command and cache key. Builds, fetches "
                                   "and writes nothing.")
    options.add(p, "recipe", "recipes-dir", "patches-dir", "cache-dir", "mirror")
    p.set_defaults(handler=cmd_plan)


def cmd_plan(args, ui) -> CommandResult:
    recipe = recipe_from_args(args)
    with make_runtime(recipe.target, ui) as runtime:
        plan = make_plan(recipe, runtime)
    data = plan_to_dict(plan)
    for comp, entry in zip(plan.components, data["components"]):
        entry["argv"], entry["build-env"] = exact_command(plan, comp, runtime.kind, cache_dir(args))
    table = Table(title=f"plan for {recipe.name} ({plan.target.runtime}, python {plan.target.python_version}, "
                        f"oneAPI {plan.toolchain.oneapi_version or 'none'})")
    for col in ("component", "commit", "patches", "command", "cache key"):
        table.add_column(col, overflow="fold")
    for c in data["components"]:
        table.add_row(c["name"], c["commit"][:12], "\n".join(f"{p['path']} {p['sha256'][:12]}" for p in c["patches"]),
                      " ".join(c["argv"]), c["cache-key"][:16])
    return CommandResult(data, 0, "", (table,))


def exact_command(plan, cp, runtime_kind: str, cache: Path) -> tuple[list[str], dict]:
    """The argv and the build env (over the target's base env) a build of `cp` runs. On the host the
    output directory is fresh per build: its random suffix shows as XXXXXXXX."""
    from toolchain.build.stack import _fill, build_env
    from toolchain.sources.trees import SourceTrees

    comp = cp.component
    container = runtime_kind != "host"
    key = SourceTrees.key(comp.commit, cp.patches, comp.subdir)
    src_root = "/toolchain/src" if container else str(cache / "trees" / key)
    src = f"{src_root}/{comp.subdir}" if comp.subdir else src_root
    out = "/toolchain/out" if container else str(cache / "work" / f"{cp.cache_key}-XXXXXXXX")
    deps = {d.name: (f"/toolchain/deps/{d.name}" if container else str(cache / "trees" / SourceTrees.key(d.commit, (), "")))
            for d in comp.fetchcontent}
    env = build_env(plan, cp, src, deps, "0", True)
    if "SOURCE_DATE_EPOCH" in env:
        env["SOURCE_DATE_EPOCH"] = "<committer date of the commit>"
    from toolchain.core.redact import redact_env

    return [_fill(a, python=plan.recipe.target.python, src=src, out=out) for a in comp.command], redact_env(env)
