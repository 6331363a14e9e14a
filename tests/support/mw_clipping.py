"""Clipping under a strategy: the problem every clipping test trains, and its worker script.

A tiny MLP trained by SGD on 6 global batches of 8, with a clip threshold small enough that
every step clips. Usage as a worker: `python -m support.mw_clipping OUT_DIR`; each worker
trains every cell of `WORKER_CELLS` under one multi_worker strategy (the tcp ones last,
once the ring is connected) and writes each cell's weights to OUT_DIR/worker<index>.npz.
`python -m support.mw_clipping OUT_DIR hybrid` trains `HYBRID_CLIP` under
make_strategy("hybrid") on two devices per worker instead, into OUT_DIR/hybrid<index>.npz.
"""

import pathlib
import sys

import keras
import numpy as np
import tensorflow as tf

from support.mw_equivalence import global_batches

GLOBAL_BATCH = 8
STEPS = 6
LEARNING_RATE = 0.1
# Thresholds well under the gradients' own size, so that every step clips.
CLIPS = {"clipnorm": 0.05, "global_clipnorm": 0.5, "clipvalue": 0.01}
# The sums behind one gradient, batch rows aside: widths 5, 16, 8 forward and 1, 8, 16 back.
TERMS = 5 + 16 + 8 + 1 + 8 + 16

# (name, clip, options of mgpu_tf.comm.prepare.install): what the two workers train.
WORKER_CELLS = (
    ("tensorflow-clipnorm", "clipnorm", {"transport": "tensorflow"}),
    ("tensorflow-global_clipnorm", "global_clipnorm", {"transport": "tensorflow"}),
    ("tensorflow-sharded-clipnorm", "clipnorm",
     {"transport": "tensorflow", "shard_optimizer_state": True}),
    ("tensorflow-sharded-global_clipnorm", "global_clipnorm",
     {"transport": "tensorflow", "shard_optimizer_state": True}),
    ("tcp-clipnorm", "clipnorm", {"transport": "tcp"}),
    ("tcp-sharded-global_clipnorm", "global_clipnorm",
     {"transport": "tcp", "shard_optimizer_state": True}),
    ("tcp-sharded-clipnorm", "clipnorm", {"transport": "tcp", "shard_optimizer_state": True}),
    ("tcp-sharded-clipvalue", "clipvalue", {"transport": "tcp", "shard_optimizer_state": True}),
)


HYBRID_CLIP = "global_clipnorm"


def data():
    """`(x, y, initial weights)`: `STEPS` global batches and the model's starting point."""
    rng = np.random.RandomState(7)
    x = rng.normal(size=(GLOBAL_BATCH * STEPS, 5)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.5 * x[:, 1:2] * x[:, 2:3]).astype("float32")
    shapes = [w.shape for w in _layers().get_weights()]
    weights = [rng.normal(scale=0.5, size=s).astype("float32") for s in shapes]
    return x, y, weights


def _layers(dtype=None):
    return keras.Sequential([
        keras.Input((5,)),
        keras.layers.Dense(16, activation="tanh", dtype=dtype),
        keras.layers.Dense(8, activation="tanh", dtype=dtype),
        keras.layers.Dense(1, dtype="float32"),
    ])


def build_model(weights, clip=None, *, mixed=False, before_compile=None, **optimizer_options):
    """The compiled model: SGD with `clip` (a key of `CLIPS`, None: none).

    `mixed`: the hidden layers in mixed_float16, the optimizer in a `LossScaleOptimizer`.
    `before_compile` is called with the optimizer before `compile`, which keeps the
    communication it installs.
    """
    model = _layers("mixed_float16" if mixed else None)
    model.set_weights(weights)
    if clip is not None:
        optimizer_options[clip] = CLIPS[clip]
    optimizer = keras.optimizers.SGD(LEARNING_RATE, **optimizer_options)
    if mixed:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    if before_compile is not None:
        before_compile(optimizer)
    model.compile(optimizer=optimizer, loss="mse")
    return model



def train(strategy, clip, *, global_batch=GLOBAL_BATCH, **options):
    """The weights after one epoch under `strategy` (`None`: no strategy)."""
    x, y, weights = data()
    scope = strategy.scope() if strategy is not None else tf.distribute.get_strategy().scope()
    with scope:
        model = build_model(weights, clip, **options)
    model.fit(global_batches(x, y, global_batch), epochs=1, shuffle=False, verbose=0)
    return model.get_weights()


def _keras_release():
    return tuple(int(part) for part in keras.__version__.split(".")[:2])


def hybrid(out_dir):
    import mgpu_tf

    mgpu_tf.simulate_devices(2)
    strategy = mgpu_tf.make_strategy("hybrid", devices_per_worker=2)
    x, y, weights = data()
    with strategy.scope():
        model = mgpu_tf.prepare_model(build_model(weights), strategy)
    model.compile(optimizer=keras.optimizers.SGD(
        LEARNING_RATE, **{HYBRID_CLIP: CLIPS[HYBRID_CLIP]}), loss="mse")
    examples = tf.data.Dataset.from_tensor_slices((x, y))
    model.fit(mgpu_tf.shard_dataset(examples, strategy, GLOBAL_BATCH), epochs=1, verbose=0)
    index = strategy.task_index
    np.savez(pathlib.Path(out_dir) / f"hybrid{index}.npz", *model.model.get_weights())
    print(f"worker {index}: done")


def main(out_dir, mode="multi_worker"):
    import mgpu_tf
    from mgpu_tf.cluster import detect as cluster
    from mgpu_tf.comm import prepare as communication

    if mode == "hybrid":
        return hybrid(out_dir)
    strategy = mgpu_tf.make_strategy("multi_worker")
    x, y, weights = data()
    saved = {}
    for name, clip, options in WORKER_CELLS:
        if options.get("shard_optimizer_state") and _keras_release() < (3, 10):
            continue  # refused there
        with strategy.scope():
            model = build_model(weights, clip, before_compile=lambda optimizer: (
                communication.install(optimizer, strategy, **options)))
        model.fit(global_batches(x, y, GLOBAL_BATCH), epochs=1, shuffle=False, verbose=0)
        for i, weight in enumerate(model.get_weights()):
            saved[f"{name}/{i}"] = weight
    index = cluster.detect_cluster().task_index
    np.savez(pathlib.Path(out_dir) / f"worker{index}.npz", **saved)
    print(f"worker {index} of {strategy.num_replicas_in_sync} replicas: done")


if __name__ == "__main__":
    main(*sys.argv[1:])
