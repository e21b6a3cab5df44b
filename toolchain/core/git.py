"""The one way to run git: an argv list through `core.proc.runner.run`, with one environment for every call.

Every call gets: no prompts (a missing credential fails at once instead of waiting on a terminal), the C
locale (messages parsed or shown are the same everywhere), and a few settings that a user's git config must
not change under the tool: no signature lines in `git log`/`show` output, no signing of the commits the tool
makes, no line-ending conversion in checkouts. The settings travel as GIT_CONFIG_COUNT entries (after any the
caller's environment already has), so command lines in the logs stay the commands themselves.

Queries shared by several stages live here too (`commit_id`, `is_ancestor`); what is
specific to a stage (mirrors, trees, bisect candidates) stays in that stage and calls `git()`.

The CLI is used everywhere, not GitPython (measured by `python -m benchmarks.bench_git`, figures in
DESIGN.md): one `git log` reads a range of commits 3-4x faster than GitPython's walk or its persistent
`cat-file --batch`, and the tool reads single commits only a few times per component, where importing
GitPython alone costs as much as some 40 `git show` calls.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from toolchain.core.proc.runner import CommandFailed, Completed, run

GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}
SAFE_CONFIG = (("log.showSignature", "false"), ("commit.gpgsign", "false"), ("tag.gpgsign", "false"),
               ("core.autocrlf", "false"))


def git_env(extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every git call: `base` (default os.environ), GIT_ENV, the safe settings, `extra`."""
    env = dict(os.environ if base is None else base)
    env.update(GIT_ENV)
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0") or "0")
    except ValueError:
        count = 0
    for i, (key, value) in enumerate(SAFE_CONFIG, count):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    env["GIT_CONFIG_COUNT"] = str(count + len(SAFE_CONFIG))
    env.update(extra or {})
    return env


def git(args: Sequence[str], *, cwd: Path | None = None, git_dir: Path | None = None,
        env: Mapping[str, str] | None = None, log: Path | None = None, capture: bool = True, check: bool = True,
        hint: str | None = None, stdin: bytes | None = None) -> Completed:
    """`git [--git-dir G] ARGS` in `cwd` (a work tree or a bare repository). `env`: extra variables (e.g. the
    author and dates of a commit the tool makes); `stdin`: bytes fed to git (`update-ref --stdin`)."""
    argv = ["git"] + (["--git-dir", str(git_dir)] if git_dir else []) + list(args)
    return run(argv, env=git_env(env), cwd=cwd, log=log, capture=capture, check=check, hint=hint, stdin=stdin)


def commit_id(repo: Path, rev: str) -> str | None:
    """The full id of the commit `rev` names in `repo` (bare or not), or None when it names none."""
    done = git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=repo, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    """Whether commit `older` is an ancestor of `newer` in `repo` (git merge-base --is-ancestor)."""
    done = git(["merge-base", "--is-ancestor", older, newer], cwd=repo, check=False)
    if done.returncode not in (0, 1):
        raise CommandFailed(done.argv, done.returncode, None, done.stderr)
    return done.returncode == 0

