"""Worker script: a user's script, without `worker_failures`, whose peer dies mid-fit.

    python -m support.mw_lost_peer TRANSPORT

Two workers train under `make_strategy("multi_worker", timeout_seconds=5,
transport=TRANSPORT)`; worker 1 SIGKILLs itself after its third step. What worker 0 prints
is what a user sees.
"""

import os
import signal
import sys

import keras
import numpy as np
import tensorflow as tf

import mgpu_tf


class _DiesAtStep3(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 2:
            os.kill(os.getpid(), signal.SIGKILL)


def main(transport):
    strategy = mgpu_tf.make_strategy("multi_worker", timeout_seconds=5, transport=transport)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((256, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, 32)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    dies = [_DiesAtStep3()] if strategy.cluster_resolver.task_id == 1 else []
    model.fit(data, epochs=20, verbose=0, callbacks=dies)


if __name__ == "__main__":
    main(sys.argv[1])
