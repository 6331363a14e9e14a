"""What a multi-worker `fit` runs: Keras' own writing callbacks refused, a stop on SIGTERM added.

Every worker of a multi-worker fit runs every callback: Keras' `ModelCheckpoint` had both
workers write one file (a corrupt zip). `fit_callbacks` refuses Keras' `ModelCheckpoint`,
`TensorBoard` and `BackupAndRestore`, naming the toolkit's chief-only, atomic counterpart
(`mgpu_tf.callbacks`), adds the stop at a step boundary on SIGTERM (`cluster.stopping`) and,
with `timeout_seconds`, the step marks `cluster.step_watchdog` keeps.

Design: docs/reliability.md#chief-only-writes-never-half-a-file
"""

import keras

from mgpu_tf.base import kind as kind_lib
from mgpu_tf.cluster import step_watchdog
from mgpu_tf.cluster import stopping

__all__ = ["check_writers", "fit_callbacks"]

# Keras' callbacks every worker would write with, and the toolkit's that write from the chief.
_WRITERS = {keras.callbacks.ModelCheckpoint: "ModelCheckpoint",
            keras.callbacks.TensorBoard: "TensorBoard",
            keras.callbacks.BackupAndRestore: "BackupAndRestore"}


def check_writers(callbacks):
    """Raises `ValueError` for Keras' `ModelCheckpoint`, `TensorBoard` or `BackupAndRestore`
    among `callbacks` (those classes exactly), naming the `mgpu_tf.callbacks` counterpart."""
    for callback in callbacks:
        name = _WRITERS.get(type(callback))
        if name is not None:
            raise ValueError(
                f"Keras' {name} cannot run in a multi-worker fit: every worker writes the "
                f"same files, which corrupts them. Received: callbacks=[keras.callbacks."
                f"{name}(...)]. Use mgpu_tf.callbacks.{name} with the same arguments: it "
                "writes from the chief only, atomically"
                + (", and resumes every worker from the chief's backup."
                   if name == "BackupAndRestore" else "."))


def fit_callbacks(callbacks, watchdog=None, vote=None):
    """The callbacks a multi-worker `fit` runs for its `callbacks` (a list, tuple or None; a
    `CallbackList` runs as given): those, checked by `check_writers`, between the step marks
    of `watchdog` (a `StepWatchdog`, or None), and a
    `mgpu_tf.cluster.stopping.StopAtStepBoundary` last when a stop on SIGTERM is installed,
    agreeing on the stop's step through `vote` (the kind's `StopVote`, or None)."""
    if not isinstance(callbacks, (list, tuple, type(None))):
        return callbacks
    given = list(callbacks or ())
    check_writers(given)
    run = list(kind_lib.with_companions(given))
    if watchdog is not None:
        run = [step_watchdog.WatchSteps(watchdog, "end"), *run,
               step_watchdog.WatchSteps(watchdog, "begin")]
    # The toolkit's backups, which the stop writes first (mgpu_tf.callbacks.BackupAndRestore).
    stop = stopping.fit_callback([c for c in given if hasattr(c, "backup_now")], vote)
    if stop is not None:
        run.append(stop)
    return callbacks if run == given else run
