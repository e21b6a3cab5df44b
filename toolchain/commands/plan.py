"""`toolchain plan`: the fully resolved plan (components, commits as the local mirror has them, patches, env,
exact commands, cache keys); builds nothing."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.build.plan import make_plan, plan_to_dict, unprobed_plan
from toolchain.commands import options
from toolchain.commands.options import cache_dir, recipe_from_args
from toolchain.console import UI, CommandResult, Grid
from toolchain.target import absent_image, make_runtime

if TYPE_CHECKING:
    from toolchain.build.plan import ComponentPlan, Plan
    from toolchain.recipe.model import Swap
    from toolchain.target.base import BuildRuntime


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plan", help="show the fully resolved plan; builds nothing",
                       description="Show what `toolchain build` would do, exactly: each component's commit, "
                                   "patches with sha256, environment, command and cache key, and each commit "
                                   "as the local mirror has it (describe, date, SOURCE_DATE_EPOCH); the "
                                   "compile jobs each component gets and why, and the compiler cache. Builds "
                                   "nothing, pulls no image (one that is not here is a line: what a build "
                                   "pulls) and clones no mirror (a mirror that lacks a pinned commit is "
                                   "fetched once: still absent is exit 2). Without oneAPI the toolchain "
                                   "shows as \"not captured\".")
    options.add_recipe(p)
    options.add(p, "cache-dir", "mirror", "no-compiler-cache")
    p.set_defaults(handler=cmd_plan)


def cmd_plan(args: argparse.Namespace, ui: UI) -> CommandResult:
    """The whole plan, even where it cannot be complete: a toolchain that cannot be captured here is shown
    "not captured: <why>", and each commit as the local mirror has it (describe, date, SOURCE_DATE_EPOCH)."""
    from toolchain.build import ccache
    from toolchain.build.fetchcontent_check import declared_table
    from toolchain.build.plan import source_facts
    from toolchain.core.proc.runner import display
    from toolchain.sources.mirrors import Mirrors, parse_rewrites
    from toolchain.sources.rewrites import recipe_rewrites

    recipe = recipe_from_args(args)
    cache = cache_dir(args)
    cc = ccache.choose(recipe.build, cache, disabled=args.no_compiler_cache, ui=ui)
    image = absent_image(recipe.target, ui)
    runtime = make_runtime(recipe.target, ui)  # (it names the build's paths: entered only to probe)
    if image is not None:  # the target is entered only where nothing has to be pulled
        plan = unprobed_plan(recipe, f"the image {image.key} names is not here, and plan pulls nothing")
    else:
        with runtime:
            plan = make_plan(recipe, runtime, need_toolchain=False)
    facts = source_facts(recipe, Mirrors(cache), lambda: Mirrors(
        cache, recipe_rewrites(recipe, cache) + parse_rewrites(args.mirror), ui=ui))
    data = plan_to_dict(plan)
    data["compiler-cache"] = {"enabled": cc.enabled, "required": cc.required, "why": cc.why,
                              "dir": str(cc.data_dir) if cc.enabled else None,
                              "remote": cc.remote.shown if cc.remote else None,
                              "remote-mode": cc.remote.mode if cc.remote else None}
    for comp, entry in zip(plan.components, data["components"], strict=False):
        if comp.is_prebuilt:
            continue
        # where each patch and input file was found (the folder searched that had it), and the inputs' sha256
        for patch, shown in zip(comp.patches, entry["patches"], strict=False):
            shown["found-in"] = str(_root(patch.file, patch.path)) if patch.file is not None else patch.url
        entry["inputs"] = [{"path": i.label, "sha256": i.sha256, "found-in": str(i.file) if i.file else ""}
                           for i in comp.inputs]
        fact = facts[comp.name]
        entry.update({"describe": fact.describe, "date": fact.date, "source-date-epoch": fact.epoch,
                      "mirror": fact.missing or "has the commit"})
        entry["argv"], entry["build-env"] = exact_command(plan, comp, runtime, cache, fact.epoch)
        if fact.describe:  # declared (at the commit, in the mirror) against pinned
            entry["fetchcontent-declared"] = declared_table(comp.component, Mirrors(cache).path(comp.component.url))
    oneapi = plan.toolchain.oneapi_version or ("not captured" if plan.toolchain_missing else "none")
    table = plan_grid(f"plan for {recipe.name} ({plan.target.runtime}, python "
                      f"{plan.target.python_version or 'not probed'}, "
                      f"oneAPI {oneapi})", data["components"])
    from rich.markup import escape

    lines = [f"[bold]{c['name']}[/] prebuilt {escape(_prebuilt_line(c['prebuilt']))}" if "prebuilt" in c else
             f"[bold]{c['name']}[/] cache key {c['cache-key'][:16] or '(needs the toolchain)'}"
             + (f" — {escape(c['mirror'])}" if not c["describe"] else "")
             + f"\n  $ {escape(display(c['argv']))}"
             + "".join(f"\n  FetchContent {escape(r['name'])}: {escape(r['status'])}"
                       + (f" ({escape(r['detail'])})" if r["detail"] else "")
                       + "".join(f"\n    {escape(d)}" for d in r["declared"])
                       for r in c.get("fetchcontent-declared", ())) for c in data["components"]]
    lines += [f"recipe {escape(f.name)}: {escape(str(f.file))} ({escape(f.where)})" for f in recipe.found]
    lines += [swap_line(s) for s in recipe.swaps]
    if image is not None:
        data["image"] = image.to_json()
        lines.append(f"[yellow]{escape(image.key)}[/]: {escape(image.line())}")
    if plan.toolchain_missing:
        lines.append(f"[yellow]toolchain {escape(data['toolchain']['status'])}[/]\n  the cache keys depend on "
                     "it; `toolchain build` needs it")
    lines.append(f"compiler cache: {escape(cc.why)}")
    for cp in plan.components:
        if cp.jobs:
            lines.append(f"jobs for {cp.name}: {escape(cp.jobs.why)}")
            if cp.jobs.warning:
                ui.warn(f"{cp.name}: {cp.jobs.warning}")
    return CommandResult(data, 0, "\n".join(lines), (table,))


def _shown(place: str) -> str:
    """A folder as the table shows it: relative to the current folder where that is shorter (as git shows
    paths; the table stays within the terminal), else as given (a URL, an absolute path); --json keeps it whole."""
    if "://" in place:
        return place
    try:
        rel = os.path.relpath(place)
    except ValueError:
        return place
    return rel if len(rel) < len(place) else place


def _root(file: Path, label: str) -> Path:
    """The patches folder a patch was found in: its file without the path the recipe wrote."""
    parts = len(Path(label).parts)
    return file.parents[parts - 1] if file.parts[-parts:] == Path(label).parts else file.parent


def swap_line(swap: Swap) -> str:
    """How `plan` notes an inherited component an extending recipe swapped."""
    from rich.markup import escape

    what = "for a prebuilt" if swap.to == "prebuilt" else "back to a build from source"
    line = (f"[bold]{escape(swap.component)}[/] swapped {what} by {escape(swap.file.name)}: the inherited "
            f"{escape(', '.join(swap.dropped) or 'nothing')} dropped (after, dist and import kept)")
    if swap.to == "source":
        line += (f"; restored as they were before {escape(swap.restored_from)} swapped them out: "
                 f"{escape(', '.join(swap.restored))} (url and commit: {escape(swap.file.name)}'s)" if swap.restored
                 else "; nothing to restore: every key of the build comes from " + escape(swap.file.name))
    return line


def _prebuilt_line(pre: dict[str, Any]) -> str:
    """How `plan` shows a prebuilt component: never compiled; the file and sha256 once pinned."""
    what = pre.get("requirement") or pre.get("url", "")
    if pre.get("sha256"):
        return f"{what}: {pre.get('file', '')} sha256 {pre['sha256'][:16]}… (never compiled)"
    return f"{what}: {pre.get('status', '')} (never compiled)"


DEVICE_KEYS = ("AOT_DEVICES", "SYCL_TARGET", "ARCH_LIST")  # env keys naming the cards a build targets


def device_env(env: dict[str, str]) -> str:
    """The variables of a component's env that say which cards it is built for (VLLM_XPU_AOT_DEVICES,
    ARK_SYCL_TARGET, ...): what differs between the B60 and the B70 plans."""
    return "\n".join(f"{k}={v}" for k, v in sorted(env.items()) if k.endswith(DEVICE_KEYS))


def plan_grid(title: str, components: list[dict[str, Any]]) -> Grid:
    """The plan's table: fits 80 columns by wrapping rows (console.Grid); patches and devices always shown."""
    rows = []
    for c in components:
        if "prebuilt" in c:
            pre = c["prebuilt"]
            rows.append((c["name"], "prebuilt", "-", "wheel: " + (pre.get("requirement") or pre.get("file", "")),
                         "-", "-"))
            continue
        source = (f"{c['describe']}\n{c['date']}\nepoch {c['source-date-epoch']}" if c["describe"]
                  else "not fetched yet")
        jobs = c.get("jobs", {})
        files = [f"{p['path']} {p['sha256'][:12]}" + (f" (at the {p['applied-at']})" if p.get("applied-at") else "")
                 + (f"\n  in {_shown(p['found-in'])}" if p.get("found-in") else "") for p in c["patches"]]
        files += [f"input {i['path']} {i['sha256'][:12]}" + (f"\n  at {_shown(i['found-in'])}" if i["found-in"] else "")
                  for i in c.get("inputs", ())]
        rows.append((c["name"], c["commit"][:12], f"{jobs['jobs']} ({jobs.get('source', '')})" if jobs else "-",
                     source, "\n".join(files) or "-", device_env(c.get("env") or {}) or "-"))
    # the source column: a built component's commit (describe, date, SOURCE_DATE_EPOCH), or a prebuilt's wheel
    return Grid(title, ("component", "commit", "jobs", "source", "patches, inputs", "devices"), tuple(rows))


def exact_command(plan: Plan, cp: ComponentPlan, runtime: BuildRuntime, cache: Path,
                  epoch: str = "") -> tuple[list[str], dict[str, str | None]]:
    """The argv and the build env (over the target's base env) a build of `cp` runs, with the paths the
    runtime's workspace shows the build. On the host the output directory is fresh per build: its random
    suffix shows as XXXXXXXX. `epoch`: the commit's committer date (SOURCE_DATE_EPOCH), "" when the mirror does
    not have the commit yet."""
    from toolchain.build.stack import _fill, build_env
    from toolchain.sources.trees import SourceTrees

    comp = cp.component
    key = SourceTrees.key(comp.commit, cp.patches, comp.subdir)
    src_root, out, deps = runtime.workspace_paths(
        cache / "trees" / key, cache / "work" / f"{cp.cache_key or 'KEY'}-XXXXXXXX",
        {d.name: cache / "trees" / SourceTrees.key(d.commit, (), "") for d in comp.fetchcontent})
    src = f"{src_root}/{comp.subdir}" if comp.subdir else src_root
    env = build_env(plan, cp, src, deps, epoch or "0", True)
    if "SOURCE_DATE_EPOCH" in env and not epoch:
        env["SOURCE_DATE_EPOCH"] = f"(the committer date of {comp.commit[:12]}: not fetched yet)"
    from toolchain.core.redact import redact_argv, redact_env

    return redact_argv([_fill(a, python=plan.recipe.target.python, src=src, out=out) for a in comp.command]), \
        redact_env(env)
