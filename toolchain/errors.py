"""Error classes. Each carries the exit code `cli.main()` uses; only `main()` prints and exits."""

from __future__ import annotations


class ToolError(Exception):
    """An error a user can act on: `str(err)` says what failed; `hint` says what to do."""

    return_code = 1
    component: str | None = None  # set by the build stage: the component whose build raised it

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def add_hint(self, text: str, *, cause: bool = False) -> None:
        """Add to the TIP. The TIP leads with the cause at hand: `cause=True` when `text` names it (it goes
        first), else `text` follows what the TIP already says."""
        if not self.hint:
            self.hint = text
        else:
            self.hint = f"{text}\n{self.hint}" if cause else f"{self.hint}\n{text}"

    def blame(self, component: str) -> None:
        """Name the component whose build raised it (a component named before stays: the innermost knows)."""
        if self.component is None:
            self.component = component


class UsageError(ToolError):
    """Bad command-line input."""

    return_code = 2


class RecipeError(ToolError):
    """A recipe (or lock) that cannot be used as written. Carries every problem found."""

    return_code = 2

    heading = "invalid recipe"  # what failed, above a list of problems

    def __init__(self, problems: list[str] | str, *, hint: str | None = None) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        head = self.heading if len(self.problems) > 1 else self.problems[0]
        body = "\n".join(f"  - {p}" for p in self.problems) if len(self.problems) > 1 else ""
        super().__init__(f"{head}:\n{body}" if body else head, hint=hint)


class SourceError(ToolError):
    """A repository, commit or patch problem. Usually fixed by editing the recipe: exit 2."""

    return_code = 2


class BuildError(ToolError):
    """A build step failed."""

    return_code = 1


class TestFailed(ToolError):
    """A smoke/regression or verification step failed."""

    __test__ = False  # not a pytest class
    return_code = 1


class TransientError(BuildError):
    """A failure of the surroundings, not of the recipe or the commit: the network (DNS, refused, timeout, TLS,
    proxy), a full disk, an interruption. The same input may succeed later, so bisect never remembers it as
    unbuildable: it stops, and can be resumed. `kind` names the class ("network", "disk-full", "interrupted")."""

    KINDS = ("network", "disk-full", "interrupted")

    def __init__(self, message: str, *, kind: str, hint: str | None = None) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"TransientError kind {kind!r} is not one of {self.KINDS}")
        super().__init__(message, hint=hint)
        self.kind = kind
