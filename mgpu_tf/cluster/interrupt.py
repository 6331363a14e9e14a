"""Ctrl-C and SIGTERM to the launcher: a flag its loop reads, and the exit code they give.

Design: docs/design.md#local-launcher
"""

import contextlib
import signal
import threading

__all__ = ["Interrupt", "as_flag"]


class Interrupt(threading.Event):
    """Set when the launcher is told to stop; `code` is 128 + the signal, as shells report
    it: 130 for Ctrl-C (SIGINT), 143 for SIGTERM."""

    signum = signal.SIGINT

    def stop(self, signum):
        self.signum = signal.Signals(signum)
        self.set()

    @property
    def code(self):
        return 128 + self.signum


@contextlib.contextmanager
def as_flag(interrupted):
    """Ctrl-C and SIGTERM set `interrupted` (an `Interrupt`) in the main thread instead of
    raising a `KeyboardInterrupt` that may land anywhere (inside `Popen` after the fork,
    before the worker is recorded): the group's loop reads the event at one point."""
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return
    previous = {s: signal.signal(s, lambda signum, _: interrupted.stop(signum))
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield interrupted
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
