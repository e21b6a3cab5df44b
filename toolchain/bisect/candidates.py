"""A component's candidates: the first-parent commits good..bad of its repository (the mirror, fetched when
a commit is missing), each with its subject, date, web URL and whether it is a merge.

First parent: a merge is one candidate (the whole branch it brings in); a merge found first bad is bisected
again along its branch (`--good M^1 --bad M`, which the result suggests).

One tree, one candidate (`distinct_trees`): a component built from a subdirectory builds the same sources at
every commit that leaves that subtree as it was (most commits of a monorepo), and the recipe (patches, pins,
env) is the same for every step, so only the commits that change the subtree are candidates, and a verdict
holds for the commits after it up to the next change. The bad end is then the commit that made its tree.
A build that reads files outside its subtree (or the repository's history) needs `--every-commit`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from toolchain.bisect.core import Candidate
from toolchain.bisect.model import BisectResult
from toolchain.core.git import commit_id, git, is_ancestor
from toolchain.core.record import record, replace
from toolchain.errors import SourceError, UsageError
from toolchain.recipe.load import Recipe
from toolchain.sources.mirrors import Mirrors, Rewrite
from toolchain.sources.rewrites import recipe_rewrites

_FORMAT = "%H%x00%P%x00%s%x00%cI"


@record
class CommitRange:
    """A component's commits good..bad: the candidates a bisect tests (good first, bad last) and every
    first-parent commit of the range (`everyone`: the same, or more when the candidates are its trees'),
    which the result's last good is taken from (`adjacent_good`)."""
    candidates: tuple[Candidate, ...]
    everyone: tuple[Candidate, ...]


def component_candidates(recipe: Recipe, url: str, good: str, bad: str, cache: Path,
                         rewrites: Sequence[Rewrite] = (), *, pinned: str = "",
                         subdir: str | None = None) -> CommitRange:
    """First-parent commits good..bad of `url` from its mirror under `cache` (fetched when a commit is
    missing; `recipe` says which URL rewrites apply, `rewrites` come after them), from one walk of the
    history: all of them (`everyone`, the commits the result may name) and the candidates. `subdir` (the
    component's, "" for the root; None: every commit is a candidate): only the commits that change that tree
    (`distinct_trees`)."""
    mirrors = Mirrors(cache, recipe_rewrites(recipe, cache) + tuple(rewrites))
    repo = mirrors.ensure(url, pinned or bad)
    for rev in (good, bad):
        if commit_id(repo, rev) is None:
            repo = mirrors.ensure(url, rev)
    everyone = git_candidates(repo, good, bad, url)
    return CommitRange(everyone if subdir is None else distinct_trees(repo, everyone, subdir), everyone)


def distinct_trees(repo: Path, cands: Sequence[Candidate], subdir: str) -> tuple[Candidate, ...]:
    """`cands` (good first, bad last) without the commits whose `subdir` tree ("": the root's) is the one of the
    commit before them: the good end, then each commit that changed the tree. The bad end is the commit that
    made its tree (itself, or an earlier one with the same tree). A UsageError when good and bad have the
    same tree: no commit of the range changed what is built."""
    path = subdir.strip("/")
    query = "".join(f"{c.key}:{path}\n" if path else f"{c.key}^{{tree}}\n" for c in cands)
    out = git(["cat-file", "--batch-check=%(objectname)"], cwd=repo, stdin=query.encode()).stdout.splitlines()
    trees = [line.split()[0] if not line.endswith(" missing") else "" for line in out]
    kept = [cands[0]] + [c for c, tree, before in zip(cands[1:], trees[1:], trees[:-1], strict=True) if tree != before]
    if len(kept) == 1:
        where = f"{path}/" if path else "the repository's tree"
        raise UsageError(f"{where} is the same at --good {cands[0].short} and --bad {cands[-1].short}: no commit of "
                         "the range changes what the component builds from",
                         hint="bisect another component, or --every-commit if its build reads files outside "
                              "its subdirectory")
    return tuple(kept)


def adjacent_good(result: BisectResult, everyone: Sequence[Candidate]) -> BisectResult:
    """`result` of a bisect over `distinct_trees` with its last good the first bad's first parent, as `git bisect`
    names it: the commits after the last good candidate up to that parent left its tree as it was (the same
    sources, the same verdict; its build and lock are the last good candidate's)."""
    keys = [c.key for c in everyone]
    if result.first_bad is None or result.first_bad.key not in keys or result.last_good.key not in keys:
        return result
    parent = keys.index(result.first_bad.key) - 1
    if parent <= keys.index(result.last_good.key):
        return result
    return replace(result, last_good=everyone[parent])


def git_candidates(repo: Path, good: str, bad: str, url: str = "") -> tuple[Candidate, ...]:
    """[good, first-parent commits of good..bad oldest first (ending with bad)] from a (bare) repository."""
    good_sha, bad_sha = resolve_commit(repo, good), resolve_commit(repo, bad)
    if good_sha == bad_sha:
        raise UsageError(f"--good and --bad are the same commit ({good_sha[:12]}): nothing to bisect")
    if not is_ancestor(repo, good_sha, bad_sha):
        if is_ancestor(repo, bad_sha, good_sha):
            raise UsageError(f"--good {good_sha[:12]} is newer than --bad {bad_sha[:12]} (the range is reversed)",
                             hint="swap --good and --bad; to find a fix instead of a regression, "
                                  "use a --test-cmd that exits 1 when the bug is gone")
        raise UsageError(f"--good {good_sha[:12]} is not an ancestor of --bad {bad_sha[:12]} (they are on "
                         f"different branches)",
                         hint=f"use a good commit on the history of {bad_sha[:12]}, e.g. their merge base "
                              f"`git merge-base {good_sha[:12]} {bad_sha[:12]}` if it is known to be good")
    head = _git_log(repo, ["-1", good_sha], url)
    rest = _git_log(repo, ["--first-parent", "--reverse", f"{good_sha}..{bad_sha}"], url)
    return head + rest


def resolve_commit(repo: Path, rev: str) -> str:
    """The full commit id `rev` names in the mirror `repo`; a SourceError when it names none."""
    sha = commit_id(repo, rev)
    if sha is None:
        raise SourceError(f"{rev!r} is not a commit in {repo}",
                          hint="check the sha (a full 40-hex id is safest) and that the mirror has been fetched")
    return sha


def _git_log(repo: Path, revs: list[str], url: str) -> tuple[Candidate, ...]:
    out = git(["log", f"--format={_FORMAT}", *revs], cwd=repo).stdout
    cands = []
    for line in out.splitlines():
        sha, parents, subject, date = line.split("\x00")
        cands.append(Candidate(sha, subject, date, commit_url(url, sha), merge=len(parents.split()) > 1))
    return tuple(cands)


def commit_url(repo_url: str, sha: str) -> str:
    """A web URL for a commit, built from the repository URL ("" for local and unknown ones)."""
    url = repo_url.strip()
    if url.startswith("git@") and ":" in url:  # git@github.com:owner/repo.git
        host, path = url[4:].split(":", 1)
        url = f"https://{host}/{path}"
    elif url.startswith("ssh://"):
        rest = url[6:].split("@", 1)[-1]
        host, _, path = rest.partition("/")
        url = f"https://{host.split(':')[0]}/{path}"
    if not url.startswith(("https://", "http://")):
        return ""
    url = url.rstrip("/")
    if url.endswith(".git"):
        url = url[:-4]
    if "gitlab" in url.split("/")[2]:
        return f"{url}/-/commit/{sha}"
    return f"{url}/commit/{sha}"
