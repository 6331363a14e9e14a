"""Worker script: adaptive shards and the training monitor under make_strategy("multi_worker").

Usage: `python -m support.adaptive_worker DIR`. Worker 1 is slowed in a way that
scales with its examples: a layer of the model sleeps `SLOW_SECONDS` per example
there (and adds exactly zero, so the model computes what the reference does).
Prints one `TAG json` line per result; the chief writes TensorBoard files to DIR/tb.
MGPU_TF_TEST_TRANSPORT picks the make_strategy transport (default: tensorflow).
"""

import json
import os
import pathlib
import sys
import time

import keras
import numpy as np
import tensorflow as tf

import mgpu_tf
from mgpu_tf.data import order
from support import sharding_problem

EXAMPLES, GLOBAL_BATCH, EPOCHS = 240, 24, 4
# Far above one example's compute even on a busy core, so the order of speeds holds.
SLOW_SECONDS = 0.01


def report(tag, value):
    print(f"{tag} {json.dumps(value)}", flush=True)


class Slow(keras.layers.Layer):
    """Sleeps `seconds` per example of the batch; returns its input unchanged."""

    def __init__(self, seconds, **kwargs):
        super().__init__(**kwargs)
        self.seconds = seconds

    def call(self, x):
        def sleep(rows):
            time.sleep(self.seconds * int(rows))
            return np.float32(0.0)

        zero = tf.numpy_function(sleep, [tf.shape(x)[0]], tf.float32, stateful=True)
        return x + tf.stop_gradient(tf.reshape(zero, [])) * 0.0


def build(initial, seconds):
    model = keras.Sequential([keras.Input((sharding_problem.FEATURES,)), Slow(seconds),
                              keras.layers.Dense(1)])
    model.set_weights(initial)
    model.compile(keras.optimizers.SGD(0.1), "mse")
    return model


def seen(strategy, data, x, epoch):
    """This worker's example ids in each step of `epoch`, found by their features."""
    index = {row.tobytes(): i for i, row in enumerate(x)}
    order.position_of(strategy).set_epoch(epoch)
    steps = []
    for batch in data:
        parts = strategy.experimental_local_results(batch[0])
        steps.append([index[row.tobytes()] for part in parts for row in part.numpy()])
    order.position_of(strategy).release()
    return steps


def main(directory):
    strategy = mgpu_tf.make_strategy(
        "multi_worker", transport=os.environ.get("MGPU_TF_TEST_TRANSPORT", "tensorflow"))
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    x, y, initial = sharding_problem.problem(EXAMPLES, seed=3)
    with strategy.scope():
        model = mgpu_tf.prepare_model(build(initial, SLOW_SECONDS if task == 1 else 0.0),
                                      strategy)
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy,
                                 GLOBAL_BATCH, weights="adaptive")
    shares = mgpu_tf.kind_of(strategy).adaptive_shares()[0]
    monitor = mgpu_tf.callbacks.TrainingMonitor(log_dir=directory / "tb")
    history = model.fit(data, epochs=EPOCHS, callbacks=[monitor], verbose=0, shuffle=False)
    report("WEIGHTS", sharding_problem.to_json(model.get_weights()))
    report("SIZES", [list(shares.unit_batch_sizes(e, wait=False)) for e in range(EPOCHS)])
    report("CHANGES", shares.changes)
    report("PROBE_SECONDS", monitor.run.compute.probe_seconds)
    report("HISTORY", {k: [float(v) for v in values] for k, values in history.history.items()})
    report("SEEN", [seen(strategy, data, x, e) for e in range(EPOCHS)])


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
