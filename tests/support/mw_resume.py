"""Two workers train with every source of state a restart can lose, and may kill a worker.

    python -m support.mw_resume OUT_DIR SAVE_FREQ [START:EPOCH:BATCH ...]

Shuffled data from `shard_dataset`, dropout (a random generator), Adam (optimizer
state), `steps_per_sync=4` (gradient sums between syncs), 8 steps per epoch, 3
epochs, and `mgpu_tf.callbacks.BackupAndRestore(OUT_DIR/backup, SAVE_FREQ)`.
Worker 1 SIGKILLs itself after batch BATCH of epoch EPOCH when the group is on its
START-th start (MGPU_TF_RESTART). Every start appends where it resumed to
OUT_DIR/starts.txt (`start epoch steps_done`); the chief writes its final weights
to OUT_DIR/final.npz.
"""

import json
import os
import pathlib
import signal
import sys

import keras
import numpy as np

import mgpu_tf
from mgpu_tf import callbacks
from mgpu_tf.cluster import failures
from support import regression

EXAMPLES, FEATURES, GLOBAL_BATCH, EPOCHS = 128, 6, 16, 3


def _kills(specs, index, start):
    return {tuple(int(v) for v in spec.split(":")[1:]) for spec in specs
            if index == 1 and int(spec.split(":")[0]) == start}


class _Kill(keras.callbacks.Callback):
    def __init__(self, at):
        super().__init__()
        self.at, self.epoch = at, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) in self.at:
            os.kill(os.getpid(), signal.SIGKILL)


def main():
    out, save_freq, specs = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    save_freq = save_freq if save_freq == "epoch" else int(save_freq)
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    start = int(os.environ.get("MGPU_TF_RESTART", "0"))
    backup = out / "backup"
    if index == 0:
        out.mkdir(parents=True, exist_ok=True)
        metadata = backup / "training_metadata.json"
        where = json.loads(metadata.read_text()) if metadata.exists() else {
            "epoch": 0, "steps_done": 0}
        with open(out / "starts.txt", "a") as f:
            f.write(f"{start} {where['epoch']} {where['steps_done']}\n")
    strategy = mgpu_tf.make_strategy("multi_worker", steps_per_sync=4)
    data = regression.sharded(strategy, EXAMPLES, FEATURES, GLOBAL_BATCH, shuffle_seed=5)
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential([keras.Input((FEATURES,)),
                                  keras.layers.Dense(16, activation="tanh"),
                                  keras.layers.Dropout(0.25), keras.layers.Dense(1)])
        model = mgpu_tf.prepare_model(model, strategy)
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    with failures.worker_failures():
        model.fit(data, epochs=EPOCHS, verbose=0, shuffle=False, callbacks=[
            callbacks.BackupAndRestore(backup, save_freq=save_freq),
            _Kill(_kills(specs, index, start))])
    if callbacks.is_chief(strategy):
        np.savez(out / "final.npz", *model.get_weights())


if __name__ == "__main__":
    main()
