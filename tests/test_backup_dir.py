"""A backup directory that cannot be made fails as `fit` starts, before the first epoch; one
that a killed chief left a temporary file in is cleaned at the next backup."""

import keras
import numpy as np
import pytest

import mgpu_tf


class _Epochs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.begun = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.begun += 1


def _model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def test_a_backup_dir_the_chief_cannot_make_fails_before_training():
    # /proc takes no new directory, even for root: os.makedirs raised only at the first
    # backup, after a whole epoch of training.
    epochs = _Epochs()
    backup = mgpu_tf.callbacks.BackupAndRestore("/proc/mgpu_tf_backup")
    with pytest.raises(ValueError, match=r"^`backup_dir` cannot be made by this process: No such "
                                         r"file or directory. Received: "
                                         r"backup_dir='/proc/mgpu_tf_backup'"):
        _model().fit(np.ones((8, 2)), np.ones((8, 1)), epochs=1, verbose=0,
                     callbacks=[epochs, backup])
    assert epochs.begun == 0


def test_a_backup_dir_that_is_a_file_fails_when_the_callback_is_made(tmp_path):
    path = tmp_path / "backup"
    path.write_text("")
    with pytest.raises(ValueError, match=r"^`backup_dir` must be a directory that can be made, "
                                         r"but it is a file"):
        mgpu_tf.callbacks.BackupAndRestore(path)



def test_a_backup_removes_what_a_chief_killed_mid_write_left(tmp_path):
    # What a chief killed inside save_weights leaves: its temporary weights file and
    # metadata, under its process id.
    stale = [tmp_path / ".tmp-4194304-weights-0-3.weights.h5",
             tmp_path / ".tmp-4194304-training_metadata.json"]
    for path in stale:
        path.write_bytes(b"half a file")
    keep = tmp_path / "notes.txt"
    keep.write_text("the user's")
    model = _model()
    model.fit(np.ones((8, 2)), np.ones((8, 1)), epochs=1, verbose=0, callbacks=[
        mgpu_tf.callbacks.BackupAndRestore(tmp_path, delete_checkpoint=False)])
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["notes.txt", "training_metadata.json", "weights-1-0.weights.h5"], names
    fresh = _model()
    fresh.load_weights(tmp_path / "weights-1-0.weights.h5")
    for a, b in zip(fresh.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
