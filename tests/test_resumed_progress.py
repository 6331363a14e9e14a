"""A resumed epoch's progress bar counts the steps it runs, not a whole epoch's."""

import json
import re

import keras
import numpy as np
import tensorflow as tf

import mgpu_tf


class _FailsInEpoch1(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == 1 and batch == 4:
            raise RuntimeError("the process died")


def _bars(text):
    """{epoch number: [the counts of its bar's lines, e.g. '3/5']} from Keras' output."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text).replace("\r", "\n")
    bars, epoch = {}, None
    for line in text.splitlines():
        title = re.match(r"Epoch (\d+)/\d+$", line)
        if title:
            epoch = int(title.group(1))
            bars[epoch] = []
        elif epoch is not None and re.match(r"\d+/\d+ ", line):
            bars[epoch].append(line.split()[0])
    return bars


def test_a_resumed_epochs_bar_counts_the_steps_left(tmp_path, capsys):
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    rng = np.random.RandomState(0)
    x = rng.randn(64, 4).astype("float32")
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True))),
                                 strategy, 8)  # 8 steps an epoch
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    backup = mgpu_tf.callbacks.BackupAndRestore(tmp_path, save_freq=3)
    try:
        model.fit(data, epochs=3, verbose=0, callbacks=[backup, _FailsInEpoch1()])
    except RuntimeError:
        pass
    metadata = json.loads((tmp_path / "training_metadata.json").read_text())
    assert metadata["epoch"] == 1 and 0 < metadata["steps_done"] < 8, metadata
    left = 8 - metadata["steps_done"]
    capsys.readouterr()
    model.fit(data, epochs=3, verbose=1,
              callbacks=[mgpu_tf.callbacks.BackupAndRestore(tmp_path, save_freq=3)])
    out = capsys.readouterr().out
    assert f"resumed after step {metadata['steps_done']} of 8: {left} steps left" in out, out
    bars = _bars(out)
    assert sorted(bars) == [2, 3], bars
    # The resumed epoch: its steps, from 1, ending at all of them; the next a whole epoch.
    assert all(count.endswith(f"/{left}") for count in bars[2]), bars
    assert bars[2][0] == f"1/{left}" and bars[2][-1] == f"{left}/{left}", bars
    assert bars[3][-1] == "8/8", bars
