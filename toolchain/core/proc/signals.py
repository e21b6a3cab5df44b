"""Stop signals (SIGINT, SIGTERM, SIGHUP): `interruptible()` turns them into `Interrupted` in the main thread;
`stop_requested()` is what one does first (note it in `STOPPING`, call the `on_stop` callbacks, stop every child)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Sequence

from toolchain.core.proc.children import CHILDREN

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

STOPPING = threading.Event()
"""Set when a stop signal reached the tool (by `interruptible()`, and by the CLI's handlers): a command that
fails from then on may have failed because the signal reached it too (a Ctrl-C goes to the whole process
group), so its failure is no finding to remember (e.g. a build ahead, in another thread, as unbuildable)."""


class Interrupted(KeyboardInterrupt):
    """A stop request (Ctrl-C, SIGTERM from CI or `timeout`, SIGHUP from a closed terminal), raised where the
    main thread is, so that `finally` and `with` blocks stop what they started. A KeyboardInterrupt, so code
    that handles Ctrl-C handles all three."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signame = signal.Signals(signum).name
        super().__init__(self.signame)

    @property
    def exit_code(self) -> int:
        """The shell's exit code for the signal that stopped the command (128 + the signal number)."""
        return 128 + self.signum

    @classmethod
    def of(cls, exc: KeyboardInterrupt) -> Interrupted:
        """`exc` as an Interrupted: a plain Ctrl-C is SIGINT; another handler's exception keeps its `signum`."""
        return exc if isinstance(exc, Interrupted) else cls(int(getattr(exc, "signum", signal.SIGINT)))


@contextlib.contextmanager
def interruptible(signals: Sequence[int] = STOP_SIGNALS) -> Iterator[None]:
    """Inside: each of `signals` raises `Interrupted` in the main thread (once; later ones are ignored while
    the first one unwinds, so clean-up is not cut short). Handlers someone else installed, and signals
    ignored on purpose (nohup), are left alone. Outside the main thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if not fired:
            stop_requested(signum)
        fired.append(signum)
        if len(fired) == 1:
            raise Interrupted(signum)

    previous = {}
    for sig in signals:
        old = signal.getsignal(sig)
        if old in (signal.SIG_DFL, signal.default_int_handler):
            previous[sig] = old
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if fired:  # the stop it noted is over (cli.main clears its own): a later command in this process
            STOPPING.clear()  # (a library caller, a test) must not read it as a stop reaching its child



_ON_STOP: list[Callable[[], None]] = []


def on_stop(callback: Callable[[], None]) -> None:
    """Call `callback` (no waiting in it) when a stop signal reaches the tool: a network client drops its
    pending requests there (sharing/transport.py), so nothing waits out a timeout."""
    _ON_STOP.append(callback)


def stop_requested(signum: int) -> None:
    """What a stop signal does first, in the handler (cli.py, `interruptible`): note it (`STOPPING`), drop
    pending network requests, SIGTERM every child and SIGKILL what is left after KILL_GRACE, in a thread."""
    STOPPING.set()
    for callback in list(_ON_STOP):
        with contextlib.suppress(Exception):
            callback()
    CHILDREN.terminate()  # now, in the handler: the main thread's clean-up then sees what was sent
    CHILDREN.stop_soon()
