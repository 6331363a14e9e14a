"""Two workers with `timeout_seconds`: a failed fit, short steps that must not pile up
threads, then a peer that stays alive but stops joining.

    python -m support.mw_watchdog TIMEOUT

Each worker fails a fit inside its 4th step (NaN inputs) and waits past the timeout, then
trains 38 epochs of 8 steps of a small regression and prints `threads: BEFORE MOST` (this
process' threads before, and the most seen at a step's end). Then worker 1 sleeps inside
its 6th step's callbacks for 10 minutes while worker 0 trains on: worker 0 prints `aborted
after S s: MESSAGE` (S from the start of its 6th step to the error) and exits 3.
"""

import json
import os
import sys
import time

import keras
import numpy as np
import tensorflow as tf

import mgpu_tf
from support import regression
from support import silent_peer

FEATURES, GLOBAL_BATCH = 4, 8


def _checked(strategy):
    """A model whose forward pass fails on a NaN input."""
    with strategy.scope():
        model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Lambda(
            lambda x: tf.debugging.check_numerics(x, "input")), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    return model


def _nan_from_step(strategy, step):
    """Batches of every worker that turn NaN at `step` (counted from 0), in order."""
    x = np.ones((64, FEATURES), "float32")
    x[step * GLOBAL_BATCH:] = np.nan
    data = tf.data.Dataset.from_tensor_slices((x, np.ones((64, 1), "float32")))
    return mgpu_tf.shard_dataset(data, strategy, GLOBAL_BATCH)


def _threads():
    return len(os.listdir("/proc/self/task"))


def main():
    timeout = float(sys.argv[1])
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    # TensorFlow's collectives, which the watchdog keeps (over the ring, its own wait does).
    strategy = mgpu_tf.make_strategy("multi_worker", transport="tensorflow",
                                     timeout_seconds=timeout)
    print(f"collective timeout: {strategy.extended._communication_options.timeout_seconds}")
    data = regression.sharded(strategy, 64, FEATURES, GLOBAL_BATCH, shuffle_seed=3)
    model = regression.compiled_model(strategy, FEATURES, 8)
    model.fit(data, epochs=1, steps_per_epoch=5, verbose=0)  # traced, collectives set up
    try:  # a fit that fails inside its 4th step leaves no step in flight for the watchdog
        _checked(strategy).fit(_nan_from_step(strategy, 3), epochs=1, verbose=0)
    except tf.errors.InvalidArgumentError:
        time.sleep(timeout + 2)
    else:
        raise AssertionError("the fit on NaN inputs did not fail")
    before, most = _threads(), keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: seen.append(_threads()))
    seen = []
    model.fit(data, epochs=38, verbose=0, callbacks=[most])
    print(f"threads: {before} {max(seen)}", flush=True)
    silent_peer.fit_until_aborted(model, data, index, 6, epochs=1, steps_per_epoch=50)

if __name__ == "__main__":
    main()
