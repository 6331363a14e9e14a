"""Worker script for the reliability tests: train, optionally die, resume, write files.

Usage: `python mw_reliability.py MODE OUT_DIR [KILL_WORKER KILL_EPOCH KILL_BATCH]`.
MODE is `train` (2 workers, 3 epochs, BackupAndRestore in OUT_DIR/backup, final
weights to OUT_DIR/final.npz, each step's (start, epoch, batch) appended to
OUT_DIR/steps-<worker>.txt) or `files` (one epoch with every chief-only writer).
The kill happens on the first start of the group only (MGPU_TF_RESTART=0).
MGPU_TF_TEST_TRANSPORT picks the make_strategy transport (default: tensorflow).
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import tensorflow as tf

import mgpu_tf
from mgpu_tf import callbacks
from mgpu_tf.cluster import failures
from mgpu_tf.cluster import launcher

EXAMPLES, FEATURES, GLOBAL_BATCH, EPOCHS = 256, 8, 32, 3


def weights(path):
    """The arrays of an `.npz` file written by `np.savez(path, *arrays)`, in order."""
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def run_with_a_kill(out, env, *, death_timeout, stop_timeout):
    """Trains on 2 workers, started by hand, where worker 1 SIGKILLs itself at epoch 0, batch 3.

    Returns `(tf_configs, processes, survivor's output, seconds from the death
    until the survivor stopped)`; both processes are gone on return.
    """
    configs = launcher.worker_tf_configs(2)
    processes = [
        subprocess.Popen([sys.executable, str(pathlib.Path(__file__).resolve()), "train",
                          str(out), "1", "0", "3"],
                         env=dict(env, TF_CONFIG=json.dumps(c)), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
        for c in configs]
    try:
        processes[1].wait(timeout=death_timeout)
        died = time.monotonic()
        output, _ = processes[0].communicate(timeout=stop_timeout)
        seconds = time.monotonic() - died
    finally:
        for p in processes:
            p.kill()
            p.wait()
    return configs, processes, output, seconds


def _data():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((EXAMPLES, FEATURES)).astype("float32")
    y = (x @ rng.standard_normal((FEATURES, 1))).astype("float32")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).with_options(options)


def _model():
    keras.utils.set_random_seed(11)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(16, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")
    return model


class _Steps(keras.callbacks.Callback):
    """Records every step and kills this worker at the chosen one."""

    def __init__(self, out, index, kill):
        super().__init__()
        self.out, self.index, self.kill = out, index, kill
        self.start = os.environ.get("MGPU_TF_RESTART", "0")

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        with open(self.out / f"steps-{self.index}.txt", "a") as f:
            f.write(f"{self.start} {self.epoch} {batch}\n")
        if self.kill and self.start == "0" and self.kill == (self.index, self.epoch, batch):
            os.kill(os.getpid(), signal.SIGKILL)


def main():
    mode, out = sys.argv[1], pathlib.Path(sys.argv[2])
    kill = tuple(int(v) for v in sys.argv[3:6]) if len(sys.argv) > 5 else None
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    out.mkdir(parents=True, exist_ok=True)
    timeout = float(os.environ.get("MGPU_TF_BENCH_TIMEOUT", "5"))
    transport = os.environ.get("MGPU_TF_TEST_TRANSPORT", "tensorflow")
    strategy = mgpu_tf.make_strategy("multi_worker", timeout_seconds=timeout, transport=transport)
    with strategy.scope():
        model = mgpu_tf.prepare_model(_model(), strategy)
    if mode == "train":
        with failures.worker_failures():
            model.fit(_data(), epochs=EPOCHS, verbose=0, callbacks=[
                callbacks.BackupAndRestore(str(out / "backup")), _Steps(out, index, kill)])
        if callbacks.is_chief(strategy):
            np.savez(out / "final.npz", *model.get_weights())
    else:
        model.fit(_data(), epochs=2, verbose=0, callbacks=[
            callbacks.ModelCheckpoint(str(out / "ckpt" / "epoch{epoch}.weights.h5"),
                                      save_weights_only=True),
            callbacks.ModelCheckpoint(str(out / "ckpt" / "best.keras"), save_best_only=True,
                                      monitor="loss"),
            callbacks.TensorBoard(str(out / "tb")),
            callbacks.BackupAndRestore(str(out / "backup"), delete_checkpoint=False),
        ])
        callbacks.save_model(model, out / "final.keras")
    print(f"worker {index} finished", flush=True)


if __name__ == "__main__":
    main()
