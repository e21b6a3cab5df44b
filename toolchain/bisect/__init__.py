"""Bisection: which commit of a component, or which change between two locks, broke the stack.

`core` (the bisector: verdicts, state, the handler protocol), `state` (the state file), `candidates` (a
component's first-parent commits), `lockdiff` (the differences between two locks), `builder` (a step's
build through the pipeline), `testers` (a command, or the smoke stage), `report` (events, result, the
published ends), `session` (`run_bisect()`, the whole bisect as one call)."""
