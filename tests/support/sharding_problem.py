"""The sharding tests' data, model and single-device reference, shared with their workers."""

import json

import numpy as np
import tensorflow as tf

__all__ = ["problem", "build_model", "reference_weights", "blocks", "write_records",
           "parse_xy", "parse_id", "to_json", "from_json"]

FEATURES = 3
# The sums behind one gradient of build_model(), batch rows aside (support.tolerance).
TERMS = FEATURES + 1


def problem(count, seed=0):
    """(x, y, initial weights) of a small linear regression."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(count, FEATURES)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5]]) + 0.1 * rng.normal(size=(count, 1))).astype("float32")
    weights = [rng.normal(size=(FEATURES, 1)).astype("float32"), np.zeros(1, "float32")]
    return x, y, weights


def build_model(weights):
    import keras

    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1)])
    model.set_weights(weights)
    model.compile(keras.optimizers.SGD(0.1), "mse")
    return model


def reference_weights(x, y, weights, steps):
    """Weights after plain Keras (default strategy) trains on each step's examples in turn.

    Args:
        steps: one list of example indices per step: that step's global batch.
    """
    assert not tf.distribute.has_strategy()
    model = build_model(weights)
    for ids in steps:
        model.train_on_batch(x[ids], y[ids])
    return model.get_weights()


def blocks(count, size):
    """Consecutive global batches: the steps of `"data"` sharding without shuffling."""
    return [list(range(s, min(s + size, count))) for s in range(0, count, size)]


def write_records(directory, x, y, sizes, prefix="part"):
    """Writes consecutive runs of examples (with their ids) into TFRecord files."""
    paths, start = [], 0
    for i, size in enumerate(sizes):
        path = str(directory / f"{prefix}-{i:02d}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for row in range(start, start + size):
                example = tf.train.Example(features=tf.train.Features(feature={
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=x[row])),
                    "y": tf.train.Feature(float_list=tf.train.FloatList(value=y[row])),
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[row])),
                }))
                writer.write(example.SerializeToString())
        paths.append(path)
        start += size
    return paths


_SPEC = {
    "x": tf.io.FixedLenFeature([FEATURES], tf.float32),
    "y": tf.io.FixedLenFeature([1], tf.float32),
    "id": tf.io.FixedLenFeature([], tf.int64),
}


def parse_xy(record):
    example = tf.io.parse_single_example(record, _SPEC)
    return example["x"], example["y"]


def parse_id(record):
    """An example whose x is its id, for counting who saw what."""
    example = tf.io.parse_single_example(record, _SPEC)
    return example["id"], example["y"]


def to_json(weights):
    return json.dumps([np.asarray(w).tolist() for w in weights])


def from_json(text):
    return [np.asarray(w, dtype="float32") for w in json.loads(text)]
