"""The private names of Keras' callbacks that `mgpu_tf.callbacks` touches, each behind one accessor.

Keras' BackupAndRestore writes its backup in place, from every worker, through a
private hook that reads private state; Keras offers no public way to change
where or how. These accessors let `mgpu_tf.callbacks.BackupAndRestore` write the
same files from the chief only, atomically. Like those of `mgpu_tf.compat.private`,
each names the private names it touches and the releases they are known for
(`versions.KNOWN`): outside them it logs once and tries; when a name is gone it
raises `PrivateNameError`, saying what to install.
"""

import functools

from mgpu_tf.compat.versions import PrivateNameError, attribute, describe, missing

__all__ = ["PrivateNameError", "backup_files", "backup_metadata", "set_backup_writer"]


def backup_files(callback):
    """Returns where Keras' BackupAndRestore `callback` keeps its backup: `(weights, metadata)`.

    Touches `BackupAndRestore._weights_path` (Keras 3.0-3.15), the weights file the
    callback loads when training starts, and `BackupAndRestore._training_metadata_path`
    (Keras 3.1-3.15), the JSON file it reads the epoch to resume from.

    Raises:
        PrivateNameError: when the callback has no such attribute.
    """
    received = f"callback={describe(callback)}"
    return (attribute(callback, "BackupAndRestore._weights_path", received),
            attribute(callback, "BackupAndRestore._training_metadata_path", received))


def backup_metadata(callback):
    """Returns what Keras' BackupAndRestore `callback` writes to its metadata file now.

    `{"epoch": the epoch to resume from, "batch": the last batch seen in it}`, from
    `BackupAndRestore._current_epoch` (Keras 3.1-3.15; Keras 3.0 kept the epoch just
    done there) and `BackupAndRestore._last_batch_seen` (Keras 3.0-3.15).

    Raises:
        PrivateNameError: when the callback has no such attribute.
    """
    received = f"callback={describe(callback)}"
    return {"epoch": attribute(callback, "BackupAndRestore._current_epoch", received),
            "batch": attribute(callback, "BackupAndRestore._last_batch_seen", received)}


def set_backup_writer(callback, write):
    """Has Keras' BackupAndRestore `callback` call `write(callback)` to write its backup.

    Keras calls `self._save_model()` (Keras 3.0-3.15) from `on_epoch_end` and
    `on_train_batch_end`, when `save_freq` says so; an instance attribute takes its
    place. The names `backup_files` and `backup_metadata` touch are checked too, so
    that one gone stops the callback's construction, not its first save.

    Args:
        callback: a `keras.callbacks.BackupAndRestore`.
        write: called with the callback each time it would write its backup.

    Raises:
        PrivateNameError: when the callback has no such method or attribute.
    """
    name = "BackupAndRestore._save_model"
    received = f"callback={describe(callback)}"
    if not callable(attribute(callback, name, received)):
        raise missing(name, received)
    backup_files(callback)
    backup_metadata(callback)
    callback._save_model = functools.partial(write, callback)
