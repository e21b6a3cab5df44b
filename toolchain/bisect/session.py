"""`run_bisect()`: a whole bisect as a library call (the `toolchain bisect` command is its argparse).

One component's commits: the first-parent commits good..bad of its repository (`candidates`), each built as
the recipe with that commit pinned (`builder`), tested by a command or the smoke stage (`testers`). Two
locks: the differences between them, then, when the culprit is a commit change, that component's commits
(`lockdiff`). Every event is reported as it happens and the state saved after every step (`report`,
`state`), so an interrupted bisect resumes where it stopped; the options are saved with it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from toolchain.bisect.builder import SpineBuilder, table_recipes
from toolchain.bisect.candidates import CommitRange, adjacent_good, component_candidates
from toolchain.bisect.core import Bisector, Builder, Tester, first_line, resumable
from toolchain.bisect.lockdiff import bisect_locks
from toolchain.bisect.report import LOG_NAME, BisectOutcome, Report, commit_outcome, lock_outcome
from toolchain.bisect.state import STATE_NAME, StateFile
from toolchain.bisect.testers import CommandTester, SmokeTester
from toolchain.console import UI
from toolchain.core.owned import OWNED_MARKER, claim
from toolchain.core.record import record, replace
from toolchain.core.serial import from_data, to_table
from toolchain.core.trust import cache_root
from toolchain.errors import UsageError
from toolchain.lock import read_lock
from toolchain.pipeline.verify import recipe_from_lock
from toolchain.recipe.load import load_recipe
from toolchain.smoke.config import SmokeOptions
from toolchain.sources.mirrors import Rewrite

DEFAULT_OUT = Path("bisect-out")
DEFAULT_JOBS = 3  # at most: builds spread over the range on idle cores, or (builds keeping every core busy) the
                 # step's and, while its test runs, both possible next midpoints (bisect/core.py)


@record
class BisectOptions:
    """What a bisect needs to start or resume (saved in the state file as `context`). Paths are absolute."""
    mode: Literal["commits", "locks"]
    out: Path
    test_cmd: tuple[str, ...] = ()        # a command with `git bisect run` semantics, or
    smoke: SmokeOptions | None = None     # the smoke stage with these options
    test_timeout: float | None = None
    recipe: Path | None = None            # mode "commits"
    component: str = ""
    good: str = ""
    bad: str = ""                         # "": the recipe's commit
    good_lock: Path | None = None         # mode "locks"
    bad_lock: Path | None = None
    cache_dir: Path | None = None         # None: $TOOLCHAIN_CACHE_DIR or ~/.cache/xpu-toolchain, when used
    rewrites: tuple[Rewrite, ...] = ()
    jobs: int = DEFAULT_JOBS
    recipes_dir: Path | None = None       # --recipes-dir / --patches-dir: find the recipe (or the lock's)
    patches_dir: tuple[Path, ...] = ()  # --patches-dir, in the order given
    check_endpoints: bool = True          # build and test the given ends first (False: --no-check-endpoints)
    resolve: bool = True                  # False: --no-resolve (the steps' locks pin no runtime closure)
    test_needs_closure: bool = False      # --test-needs-closure: each step's lock pins its closure before the test
    every_commit: bool = False            # --every-commit: not only the commits that change the component's tree

    @property
    def cache(self) -> Path:
        """The cache directory the bisect uses: the one given, else the default cache."""
        return self.cache_dir or cache_root().resolve()


def run_bisect(ui: UI, state_path: Path, options: BisectOptions | None = None, *,
               jobs: int | None = None, retry_unbuildable: bool = False) -> BisectOutcome:
    """Start a bisect with `options`, or (None) resume the one saved in `state_path`; the same bisect started
    again (after a Ctrl-C, a CI cancel) resumes too. `jobs` overrides the saved number of builds at once.
    `retry_unbuildable`: build again the candidates remembered as unbuildable (and those this bisect skipped
    because their build failed). A configuration error ends the bisect for good (`core.resumable`): the
    state file is marked done, so a corrected command starts afresh."""
    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be at least 1")
    state_file = StateFile(state_path)
    if options is not None and _same_as_saved(options, state_file):
        ui.info(f"resuming the unfinished bisect saved in {state_file.path}")
        options = None
    resuming = options is None
    opts = saved_options(state_file) if options is None else _new(options, state_file)
    if jobs is not None:  # saved with the rest: a resume builds ahead only if the bisect did
        opts = replace(opts, jobs=jobs)
    # the out folder (given, or saved in the state file): new, empty, or a bisect's own (core/owned.py)
    claim(opts.out, "bisect --out", (OWNED_MARKER, STATE_NAME, LOG_NAME), removing=False)
    resume_argv = ["toolchain", "bisect", "--resume", "--state", str(state_path.resolve())]
    state_file.update(context=to_table(opts), resume=resume_argv, done=False, **({} if resuming else {"phases": {}}))
    report = Report(ui, opts.out / LOG_NAME, resume_argv)
    tester = make_tester(opts, ui)
    if retry_unbuildable:
        state_file.retry_build_failures()
    try:
        if opts.mode == "commits":
            outcome = _bisect_commits(opts, tester, report, state_file, ui, retry_unbuildable)
        else:
            outcome = _bisect_locks(opts, tester, report, state_file, ui, retry_unbuildable)
    except Exception as exc:
        if not resumable(exc):
            state_file.update(done=True, final_error=first_line(exc))
        raise
    state_file.update(done=True)
    return outcome


def saved_options(state_file: StateFile) -> BisectOptions:
    """The options a bisect was started with, read back from its state file to resume it."""
    if not state_file.path.is_file():
        raise UsageError(f"no bisect to resume: {state_file.path} does not exist",
                         hint="pass --state FILE (or --out DIR) of the bisect you started")
    try:
        return from_data(BisectOptions, state_file.read().get("context") or {})
    except (TypeError, ValueError, KeyError) as exc:
        raise UsageError(f"{state_file.path}: the saved options are unreadable ({exc})",
                         hint="start the bisect again") from None


def _same_as_saved(options: BisectOptions, state_file: StateFile) -> bool:
    """Whether `options` start the unfinished bisect saved in `state_file` (--jobs aside; no --bad: the one
    saved, the recipe's commit when it started)."""
    if not state_file.unfinished:
        return False
    try:
        saved = saved_options(state_file)
    except UsageError:
        return False
    return replace(options, jobs=saved.jobs, bad=options.bad or saved.bad) == saved


def _new(options: BisectOptions, state_file: StateFile) -> BisectOptions:
    if state_file.unfinished:
        raise UsageError(f"{state_file.path} holds an unfinished bisect with other options",
                         hint=f"continue it with `toolchain bisect --resume --state {state_file.path}`, or pass "
                              f"another --state/--out to start a new one")
    if not options.test_cmd and options.smoke is None:
        raise UsageError("say how to test each step: --test smoke or --test-cmd CMD")
    return options


def default_state(out: Path | None) -> Path:
    """The state file of a bisect writing into `out` (the default out folder when None)."""
    return (out or DEFAULT_OUT) / STATE_NAME


def make_tester(opts: BisectOptions, ui: UI) -> Tester:
    """The tester a bisect step runs: the user's test command when given, else the smoke test."""
    logs = opts.out / "tests"
    if opts.test_cmd:
        return CommandTester(opts.test_cmd, logs, timeout=opts.test_timeout, verbose=ui.verbose,
                             needs_closure=opts.test_needs_closure)
    return SmokeTester(logs, opts.smoke or SmokeOptions(), ui)


def needs_closure(tester: Tester) -> bool:
    """Whether the test installs each step's closure (the smoke test does; a command says so by
    --test-needs-closure): then a step's closure is on its critical path, else it is resolved off it."""
    return bool(getattr(tester, "needs_closure", True))


# ---- one component's commits ---------------------------------------------------------------------------

def _bisect_commits(opts: BisectOptions, tester: Tester, report: Report, state_file: StateFile,
                    ui: UI, retry: bool) -> BisectOutcome:
    if opts.recipe is None:
        raise UsageError("a commit bisect needs --recipe")
    base = load_recipe(str(opts.recipe), opts.recipes_dir, opts.patches_dir)
    comp = base.component(opts.component)
    if not opts.bad:  # the recipe's commit, kept: a resume must not follow a later `toolchain update`
        opts = replace(opts, bad=comp.commit)
        state_file.update(context=to_table(opts))
    commits = component_candidates(base, comp.url, opts.good, opts.bad, opts.cache, opts.rewrites,
                                   pinned=comp.commit, subdir=None if opts.every_commit else comp.subdir)
    builder = SpineBuilder(lambda sha: base.with_commit(comp.name, sha), opts.out / "steps", opts.cache,
                           opts.rewrites, ui, component=comp.name, resolve=opts.resolve, retry_unbuildable=retry,
                           resolve_steps=needs_closure(tester))
    result = Bisector(commits.candidates, builder, tester, report.phase("commits"), state=state_file.load("commits"),
                      persist=state_file.saver("commits"), jobs=opts.jobs, check_ends=opts.check_endpoints).run()
    return commit_outcome(adjacent_good(result, commits.everyone), comp.name, opts.out, state_file.path)


# ---- two locks -----------------------------------------------------------------------------------------

def _bisect_locks(opts: BisectOptions, tester: Tester, report: Report, state_file: StateFile,
                  ui: UI, retry: bool) -> BisectOutcome:
    if opts.good_lock is None or opts.bad_lock is None:
        raise UsageError("a lock-to-lock bisect needs both --good-lock and --bad-lock")
    good, bad = read_lock(opts.good_lock), read_lock(opts.bad_lock)
    # The steps build with the patches on disk, which must be the bad lock's (a good lock's older patch
    # content is reported as a note); the recipe's name, path and patches directory come from it too.
    base = recipe_from_lock(bad, opts.patches_dir, opts.recipes_dir, opts.cache)

    def make_builder(phase: str, derive: Callable[[str], dict[str, Any]], component: str) -> Builder:
        return SpineBuilder(table_recipes(base, derive), opts.out / phase, opts.cache, opts.rewrites, ui,
                            component=component, resolve=opts.resolve, retry_unbuildable=retry,
                            resolve_steps=needs_closure(tester))

    def commits(component: str, url: str, good_sha: str, bad_sha: str) -> CommitRange:
        subdir = None if opts.every_commit else base.component(component).subdir
        return component_candidates(base, url, good_sha, bad_sha, opts.cache, opts.rewrites, subdir=subdir)

    result = bisect_locks(good, bad, make_builder, tester, commits, handler_for=report.phase,
                          state_file=state_file, jobs=opts.jobs, check_ends=opts.check_endpoints)
    return lock_outcome(result, opts.out, state_file.path)
