"""Training that resumes from its backup on whatever number of workers runs it.

    python -m support.mw_elastic OUT_DIR [--mirrored N] [--kill EPOCH:BATCH [--offer PATH:N]]

Shuffled data from `shard_dataset`, a global batch of 24 (6 steps per epoch), 4 epochs,
SGD with momentum, and `BackupAndRestore(OUT_DIR/backup, save_freq=3)`. Under TF_CONFIG
the strategy is multi_worker; with `--mirrored N`, mirrored over N simulated CPUs. On the
group's first start (MGPU_TF_RESTART unset or 0) the last worker SIGKILLs itself after batch
BATCH of epoch EPOCH, first writing N to PATH (its slot goes away with it) and the time to
OUT_DIR/killed_at. The chief appends `start workers replicas epoch steps_done` to
OUT_DIR/starts.txt, keeps the times of each start's first and latest step in
OUT_DIR/times-N (N: the start's line there, from 0), and writes its final weights to OUT_DIR/final.npz.
"""

import argparse
import json
import os
import pathlib
import signal
import time

import keras
import numpy as np

import mgpu_tf
from support import regression

EXAMPLES, FEATURES, GLOBAL_BATCH, EPOCHS = 144, 6, 24, 4
OUT = None


class _Kill(keras.callbacks.Callback):
    def __init__(self, epoch, batch, offer):
        super().__init__()
        self.at, self.offer, self.epoch = (epoch, batch), offer, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            if self.offer:
                path, count = self.offer.rsplit(":", 1)
                pathlib.Path(path).write_text(count + "\n")
            (OUT / "killed_at").write_text(f"{time.time()}\n")
            os.kill(os.getpid(), signal.SIGKILL)


class _Clock(keras.callbacks.Callback):
    """Keeps the wall time of this start's first and latest step in OUT/times-N, N counting
    the starts in OUT/starts.txt from 0."""

    def __init__(self, start):
        super().__init__()
        self.path, self.first = OUT / f"times-{start}", None

    def on_train_batch_end(self, batch, logs=None):
        now = time.time()
        self.first = self.first or now
        self.path.write_text(f"{self.first} {now}\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--mirrored", type=int, default=0)
    parser.add_argument("--kill", default=None)
    parser.add_argument("--offer", default=None)
    args = parser.parse_args()
    global OUT
    OUT = args.out
    config = json.loads(os.environ.get("TF_CONFIG", "null"))
    index, workers = 0, 1
    if config:
        index, workers = config["task"]["index"], len(config["cluster"]["worker"])
    if args.mirrored:
        mgpu_tf.simulate_devices(args.mirrored)
        strategy = mgpu_tf.make_strategy("mirrored", devices=args.mirrored)
    else:
        strategy = mgpu_tf.make_strategy("multi_worker")
    start = int(os.environ.get("MGPU_TF_RESTART", "0"))
    backup = args.out / "backup"
    if index == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        metadata = backup / "training_metadata.json"
        where = json.loads(metadata.read_text()) if metadata.exists() else {
            "epoch": 0, "steps_done": 0}
        with open(args.out / "starts.txt", "a") as f:
            f.write(f"{start} {workers} {strategy.num_replicas_in_sync} {where['epoch']} "
                    f"{where['steps_done']}\n")
        number = len((args.out / "starts.txt").read_text().splitlines()) - 1
    data = regression.sharded(strategy, EXAMPLES, FEATURES, GLOBAL_BATCH, shuffle_seed=5)
    model = regression.compiled_model(strategy, FEATURES, 16)
    fit_callbacks = [mgpu_tf.callbacks.BackupAndRestore(backup, save_freq=3)]
    if index == 0:
        fit_callbacks.append(_Clock(number))
    if args.kill and start == 0 and index == workers - 1:
        epoch, batch = map(int, args.kill.split(":"))
        fit_callbacks.append(_Kill(epoch, batch, args.offer))
    model.fit(data, epochs=EPOCHS, verbose=0, shuffle=False, callbacks=fit_callbacks)
    if mgpu_tf.callbacks.is_chief(strategy):
        np.savez(args.out / "final.npz", *model.get_weights())


if __name__ == "__main__":
    main()
