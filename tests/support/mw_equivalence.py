"""Worker script: a few SGD steps of `model.fit` under make_strategy("multi_worker").

Usage: `python -m support.mw_equivalence DATA.npz OUT_DIR`. DATA.npz holds `x`, `y`,
`global_batch` and the initial weights `w0`, `w1`, ...; each worker writes its
final weights to OUT_DIR/worker<index>.npz. The tests of equivalence, accumulation
and compression also use `build_model` and `global_batches` from here, so every
run trains the same model on the same global batches.
"""

import pathlib
import sys

import keras
import numpy as np
import tensorflow as tf

LEARNING_RATE = 0.1
# The sums behind one gradient of build_model(), batch rows aside: widths 5, 16, 8
# forward and 1, 8, 16 back (support.tolerance).
TERMS = 5 + 16 + 8 + 1 + 8 + 16


def build_model(weights, momentum=0.0):
    """Returns the compiled test model with the given initial weights (SGD, `momentum`)."""
    model = keras.Sequential([
        keras.Input((5,)),
        keras.layers.Dense(16, activation="tanh"),
        keras.layers.Dense(8, activation="tanh"),
        keras.layers.Dense(1),
    ])
    if weights is not None:
        model.set_weights(weights)
    model.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE, momentum=momentum), loss="mse")
    return model


def global_batches(x, y, global_batch):
    """Batches of `global_batch` consecutive examples, split by tf.distribute.

    With DATA sharding, tf.distribute cuts each global batch into one piece per
    replica and gives each worker its own pieces.
    """
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
    return dataset.with_options(options)


def main(data_path, out_dir):
    import mgpu_tf
    from mgpu_tf.cluster import detect as cluster

    strategy = mgpu_tf.make_strategy("multi_worker")
    data = np.load(data_path)
    weights = [data[f"w{i}"] for i in range(len(data.files) - 3)]
    with strategy.scope():
        model = build_model(weights)
    model.fit(global_batches(data["x"], data["y"], int(data["global_batch"])),
              epochs=1, shuffle=False, verbose=0)
    index = cluster.detect_cluster().task_index
    np.savez(pathlib.Path(out_dir) / f"worker{index}.npz", *model.get_weights())
    print(f"worker {index} of {strategy.num_replicas_in_sync} replicas: done")


if __name__ == "__main__":
    main(*sys.argv[1:])
