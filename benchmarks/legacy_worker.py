"""One process of `bench_legacy.py`: trains the benchmark's MLP one way and prints its times.

Ways (`--way`):
    one       one process, the default strategy, Keras 3 `fit` (the baseline);
    mgpu_tf   a worker of `mgpu_tf.make_strategy("multi_worker")` with default options, `fit`;
    sharded   the same, fed by `mgpu_tf.shard_dataset` (epochs of 64 steps) instead of a
              repeated `tf.data` data set;
    tf_keras  a worker of `tf.distribute.MultiWorkerMirroredStrategy` with tf_keras' `fit`,
              the official multi-worker tutorial's pattern;
    loop      a worker of `tf.distribute.MultiWorkerMirroredStrategy` with a hand-written
              custom training loop (`strategy.run`, `GradientTape`, the replica context's
              all-reduce, plain SGD on `tf.Variable`s).

Prints one line `TIMES <fit seconds> <median step ms over the timed steps>` (worker 0 only
for the multi-worker ways).
"""

import argparse
import json
import os
import time

import numpy as np

FEATURES, WIDTH, DEPTH, CLASSES = 784, 1024, 4, 10
LEARNING_RATE = 0.01


def _data(global_batch, batches=8):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((global_batch * batches, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=global_batch * batches).astype("int32")
    return x, y


def _dataset(tf, x, y, batch):
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return (tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True)
            .repeat().prefetch(tf.data.AUTOTUNE).with_options(options))


def _keras_model(keras):
    layers = [keras.Input((FEATURES,))]
    layers += [keras.layers.Dense(WIDTH, activation="relu") for _ in range(DEPTH - 1)]
    layers.append(keras.layers.Dense(CLASSES))
    return keras.Sequential(layers)


class _StepClock:
    """Step end times, for any Keras (3 or tf_keras) as a callback."""

    def __init__(self, base):
        clock = self

        class Callback(base):
            def on_train_batch_end(self, batch, logs=None):
                clock.ends.append(time.perf_counter())

        self.ends = []
        self.callback = Callback()


def _fit(keras, tf, strategy, x, y, batch, steps, warmup, sharded=False):
    with strategy.scope() if strategy is not None else _nothing():
        model = _keras_model(keras)
        model.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    clock = _StepClock(keras.callbacks.Callback)
    if sharded:
        import mgpu_tf

        data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy,
                                     batch)
        run = dict(epochs=-(-(warmup + steps) // (len(x) // batch)))
    else:
        data = _dataset(tf, x, y, batch)
        run = dict(epochs=1, steps_per_epoch=warmup + steps)
    began = time.perf_counter()
    model.fit(data, callbacks=[clock.callback], verbose=0, **run)
    return time.perf_counter() - began, clock.ends[warmup:warmup + steps]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _loop(tf, strategy, x, y, batch, steps, warmup):
    """The hand-written custom training loop of TensorFlow's distributed-training guides."""
    with strategy.scope():
        shapes = [FEATURES] + [WIDTH] * (DEPTH - 1) + [CLASSES]
        weights = []
        for i, (fan_in, fan_out) in enumerate(zip(shapes, shapes[1:])):
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            kernel = np.random.default_rng(i).uniform(-limit, limit, (fan_in, fan_out))
            weights += [tf.Variable(kernel.astype("float32")), tf.Variable(tf.zeros([fan_out]))]
    # `batch` is the global batch; each replica gets its share.
    iterator = iter(strategy.experimental_distribute_dataset(_dataset(tf, x, y, batch)))
    global_batch = batch

    def replica_step(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            h = features
            for k in range(0, len(weights) - 2, 2):
                h = tf.nn.relu(h @ weights[k] + weights[k + 1])
            logits = h @ weights[-2] + weights[-1]
            loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=logits)) / global_batch
        grads = tape.gradient(loss, weights)
        grads = tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, grads)
        for variable, grad in zip(weights, grads):
            variable.assign_sub(LEARNING_RATE * grad)
        return loss

    @tf.function
    def train_step(iterator):
        return strategy.run(replica_step, args=(next(iterator),))

    ends = []
    began = time.perf_counter()
    for _ in range(warmup + steps):
        train_step(iterator)
        ends.append(time.perf_counter())
    strategy.experimental_local_results(weights[0])[0].numpy()  # waits for the last step
    ends[-1] = time.perf_counter()
    return time.perf_counter() - began, ends[warmup:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--way", required=True, choices=("one", "mgpu_tf", "sharded", "tf_keras",
                                                        "loop"))
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--global_batch", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.way == "tf_keras":
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    # Every way reads batches of the global batch: under a multi-worker strategy Keras and
    # `experimental_distribute_dataset` split each into the workers' shares (128 each).
    batch = args.global_batch
    x, y = _data(args.global_batch)
    if args.way == "one":
        import keras

        seconds, ends = _fit(keras, tf, None, x, y, batch, args.steps, args.warmup)
    elif args.way in ("mgpu_tf", "sharded"):
        import keras
        import mgpu_tf

        strategy = mgpu_tf.make_strategy("multi_worker")
        if args.way == "sharded":
            x, y = _data(args.global_batch, batches=64)
        seconds, ends = _fit(keras, tf, strategy, x, y, batch, args.steps, args.warmup,
                             sharded=args.way == "sharded")
    elif args.way == "tf_keras":
        import tf_keras

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        seconds, ends = _fit(tf_keras, tf, strategy, x, y, batch, args.steps, args.warmup)
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        seconds, ends = _loop(tf, strategy, x, y, batch, args.steps, args.warmup)
    step_ms = 1000 * float(np.median(np.diff(ends)))
    index = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index", 0)
    if index == 0:
        print(f"TIMES {seconds:.3f} {step_ms:.3f}", flush=True)


if __name__ == "__main__":
    main()
