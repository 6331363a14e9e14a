"""Worker script for the chief-only-writes test: one run through every chief-only writer.

Usage, as 2 workers: `python -m support.mw_reliability OUT_DIR`. Trains 2 epochs with
ModelCheckpoint (every epoch, and the best), TensorBoard and BackupAndRestore
writing under OUT_DIR, then saves the model to OUT_DIR/final.keras. (The
training that loses a worker is benchmarks/failure_worker.py.)
"""

import json
import os
import pathlib
import sys

import keras
import numpy as np
import tensorflow as tf

import mgpu_tf
from mgpu_tf import callbacks

FEATURES = 8


def _data():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, FEATURES)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(16).with_options(options)


def main():
    out = pathlib.Path(sys.argv[1])
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    out.mkdir(parents=True, exist_ok=True)
    strategy = mgpu_tf.make_strategy("multi_worker")
    with strategy.scope():
        keras.utils.set_random_seed(11)
        model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model = mgpu_tf.prepare_model(model, strategy)
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
