"""Keras' own writing callbacks under several workers: made the chief's, or refused at `fit`.

Every worker of a multi-worker fit runs every callback: Keras' `ModelCheckpoint` had both
workers write one file (a corrupt zip), its `TensorBoard` one log per worker. At `fit` the
multi_worker kind hands them to `fit_callbacks`, which runs them as the toolkit's chief-only,
atomic `ModelCheckpoint` and `TensorBoard`, refuses Keras' `BackupAndRestore`, and adds the
stop at a step boundary on SIGTERM (`mgpu_tf.cluster.stopping`).

Design: docs/reliability.md#chief-only-writes-never-half-a-file
"""

import keras

from mgpu_tf.callbacks import backup as backup_lib
from mgpu_tf.callbacks import chief
from mgpu_tf.cluster import stopping

__all__ = ["chief_only", "fit_callbacks"]

# Keras' callbacks that become the toolkit's: the same arguments, written from the chief.
_CHIEF_ONLY = {keras.callbacks.ModelCheckpoint: chief.ModelCheckpoint,
               keras.callbacks.TensorBoard: chief.TensorBoard}


def chief_only(callback):
    """`callback` as one that writes from the chief only; `callback` itself when it is not
    one of Keras' writing callbacks.

    Keras' `ModelCheckpoint` and `TensorBoard` (those classes exactly: a subclass may write
    elsewhere) become the toolkit's counterpart, which shares their state: what the fit
    changes (`best`, the epochs seen) is seen on the object the user holds.

    Raises:
        ValueError: for Keras' `BackupAndRestore`, which every worker would write.
    """
    if isinstance(callback, keras.callbacks.BackupAndRestore):
        raise ValueError(
            "Keras' BackupAndRestore cannot back up a multi-worker fit: every worker writes "
            f"the same files. Received: callbacks=[keras.callbacks.BackupAndRestore("
            f"{getattr(callback, 'backup_dir', '...')!r})]. Use "
            "mgpu_tf.callbacks.BackupAndRestore(backup_dir), which writes from the chief and "
            "resumes every worker from the chief's backup.")
    safe = _CHIEF_ONLY.get(type(callback))
    if safe is None:
        return callback
    twin = safe.__new__(safe)
    twin.__dict__ = callback.__dict__  # one state, as if the user had made the toolkit's
    return twin


def fit_callbacks(callbacks):
    """The callbacks a multi-worker `fit` runs for the `callbacks` it was given.

    Args:
        callbacks: `fit`'s `callbacks`: a list, a tuple or None (a `CallbackList` is run as
            given).

    Returns:
        `callbacks` through `chief_only`, and a `mgpu_tf.cluster.stopping.StopAtStepBoundary`
        last when a stop on SIGTERM is installed.

    Raises:
        ValueError: for Keras' `BackupAndRestore`.
    """
    if not isinstance(callbacks, (list, tuple, type(None))):
        return callbacks
    given = [chief_only(callback) for callback in callbacks or ()]
    stop = stopping.fit_callback(
        [c for c in given if isinstance(c, backup_lib.BackupAndRestore)])
    if stop is None and all(a is b for a, b in zip(given, callbacks or ())):
        return callbacks
    return given + ([stop] if stop is not None else [])
