"""A multi-worker process' stop on SIGTERM or Ctrl-C: at the next step boundary, with the
chief's backup written, or after a short bound when a collective holds the step.
TensorFlow's preemption notifier catches SIGTERM once a multi-worker strategy exists, so
training went on and a launcher waited its whole grace before SIGKILL.

Design: docs/reliability.md#sigterm-and-ctrl-c
"""

import os
import signal
import sys
import threading
import time

import keras

from mgpu_tf.compat import signal_handlers

__all__ = ["BOUND_SECONDS", "SignalStop", "StopAtStepBoundary", "fit_callback", "install",
           "installed"]

# How long after the signal the step in flight may still take, beyond twice the last step's
# time, before the process exits without reaching a step boundary.
BOUND_SECONDS = 1.0

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class SignalStop:
    """The process' handler of SIGTERM and SIGINT while it trains under several workers.

    The first signal stops the fit at its next step boundary (`StopAtStepBoundary` backs up,
    then exits), or, from a thread woken through `signal.set_wakeup_fd`, `BOUND_SECONDS` plus
    twice the last step's time after it when a collective holds the step; a second exits at
    once. The process ends by the signal (exit code 143, or 130 for Ctrl-C). TensorFlow's
    displaced SIGTERM handler is still called, so its preemption notifier hears it.

    Args:
        displaced: `{signal: C handler address}` of the handlers it replaces, to chain to.
        task: what the exit line calls this process. Defaults to `"this worker"`.
    """

    def __init__(self, displaced=None, task="this worker"):
        self.displaced = dict(displaced or {})
        self.task = task
        self.signum = None
        self.received_at = None
        self.step_seconds = 0.0
        self.in_fit = False
        self._at_boundary = threading.Event()
        self._final = False
        self._read, self.wakeup_fd = os.pipe()
        os.set_blocking(self.wakeup_fd, False)

    def handle(self, signum, frame=None):
        """The Python signal handler: chains to the displaced one and notes the signal."""
        signal_handlers.call_c_handler(self.displaced.get(signum), signum)
        self._note(signum)

    def _note(self, signum):
        if self.signum is None:
            self.signum, self.received_at = signum, time.monotonic()

    def watch(self):
        """The thread that bounds the stop: woken by each signal's byte on the wakeup fd."""
        seen = 0
        while True:
            for signum in os.read(self._read, 16):
                if signum not in _SIGNALS:
                    continue
                self._note(signum)
                seen += 1
                if seen > 1:
                    self.exit(f"a second {signal.Signals(signum).name}")
            while seen == 1 and not self._final:
                bound = BOUND_SECONDS + (2 * self.step_seconds if self.in_fit else 0.0)
                if not self._at_boundary.wait(bound):
                    self.exit(f"{signal.Signals(self.signum).name}; no step boundary "
                              f"within {bound:.1f} s")
                self._at_boundary.clear()

    def reached_boundary(self, final=True):
        """A step boundary is reached: the exit is the boundary's to make, or, not `final`
        (the workers are to agree on the step), the bound counts again."""
        self._final = self._final or final
        self._at_boundary.set()

    def exit(self, why):
        """Ends the process now by its signal, after one line on stderr, without Python's
        shutdown (whose collective barrier would wait for the other workers)."""
        signum = self.signum or signal.SIGTERM
        waited = "" if self.received_at is None else \
            f" {time.monotonic() - self.received_at:.2f} s after the signal"
        try:
            sys.stdout.flush()
            sys.stderr.write(f"mgpu_tf: {self.task} stopped on {why}{waited}.\n")
            sys.stderr.flush()
        finally:
            signal_handlers.die_by(signum)


class StopAtStepBoundary(keras.callbacks.Callback):
    """Ends a fit at the step boundary after a signal of `stop` (the `SignalStop`), the
    chief writing its `backups` (the fit's `mgpu_tf.callbacks.BackupAndRestore`) first;
    with the workers' `vote` (a `StopVote`), every worker after the step that carried one."""

    def __init__(self, stop, backups=(), vote=None):
        super().__init__()
        self.stop = stop
        self.backups = list(backups)
        self.vote = vote
        self._began = None
        self._epoch = 0

    def on_train_begin(self, logs=None):
        self.stop.in_fit = True

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._still_bounded()

    def on_train_batch_begin(self, batch, logs=None):
        self._began = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if self._began is not None:
            self.stop.step_seconds = time.monotonic() - self._began
        agreed = self.vote is not None and self.vote.agreed()
        if self.stop.signum is None and not agreed:
            return
        if not agreed and self.vote is not None and self.vote.carried:
            self.vote.vote()
            self._still_bounded()
            return
        self._end(f"after step {batch + 1} of epoch {self._epoch + 1}")

    def on_test_batch_end(self, batch, logs=None):
        self._still_bounded()  # a validation's steps carry the vote too

    def on_epoch_end(self, epoch, logs=None):
        self._still_bounded()

    def on_train_end(self, logs=None):
        self.stop.in_fit = False
        if self.stop.signum is not None or (self.vote is not None and self.vote.agreed()):
            # The fit ended before its next step could carry the vote.
            self._end(f"at the end of the fit, epoch {self._epoch + 1}")

    def _still_bounded(self):
        if self.stop.signum is not None:
            self.stop.reached_boundary(final=False)

    def _end(self, where):
        self.stop.reached_boundary()
        written = [backup.backup_now() for backup in self.backups]
        name = signal.Signals(self.stop.signum).name if self.stop.signum else "a peer's signal"
        if written:
            where += ", backup " + ("written" if all(written) else
                                    "left at the last sync point (steps_per_sync)")
        self.stop.exit(f"{name} {where}")


_installed = None  # the process' one SignalStop, as signal handlers are per process


def install(task="this worker"):
    """Installs a `SignalStop` for SIGTERM and SIGINT from the main thread; returns it.

    `make_strategy("multi_worker")` calls it once the strategy (and TensorFlow's handler)
    exists; off the main thread it installs nothing (None); again, it returns the one made.
    `task` is what the exit line calls this process."""
    global _installed
    if threading.current_thread() is not threading.main_thread():
        return None
    if _installed is not None:
        return _installed
    displaced = {}
    for signum in _SIGNALS:
        current = signal_handlers.c_handler(signum)
        if signal.getsignal(signum) in (signal.SIG_DFL, signal.SIG_IGN, None) and \
                signal_handlers.is_function(current):
            displaced.setdefault(signum, current)  # a C handler Python does not know
    stop = SignalStop(displaced, task)
    for signum in _SIGNALS:
        signal.signal(signum, stop.handle)
    signal.set_wakeup_fd(stop.wakeup_fd, warn_on_full_buffer=False)
    threading.Thread(target=stop.watch, name="mgpu_tf-stop", daemon=True).start()
    sys.excepthook = _after_signal(stop, sys.excepthook)
    _installed = stop
    return stop


def _after_signal(stop, previous):
    """`sys.excepthook` that ends the process by its signal when the error came after one:
    a step whose peer stopped first fails in its collective (TensorFlow 2.19 aborts it)."""

    def hook(kind, value, traceback):
        if stop.signum is None:
            return previous(kind, value, traceback)
        stop.exit(f"{signal.Signals(stop.signum).name}; its step then failed ({kind.__name__})")

    return hook


def installed():
    """The `SignalStop` installed, or None."""
    return _installed


def fit_callback(backups=(), vote=None):
    """A `StopAtStepBoundary` for a fit with the toolkit's `backups` and the workers' `vote`,
    or None when no stop is installed."""
    return None if _installed is None else StopAtStepBoundary(_installed, backups, vote)
