"""Small Keras models for the model-parallel and planner tests, each built from a seed."""

import time

import keras
import numpy as np
import tensorflow as tf

__all__ = ["mlp", "residual", "with_batch_norm", "Wait"]


def mlp(widths=(16, 16, 16, 1), *, inputs=8, seed=0, prefix="dense"):
    """A Sequential stack of Dense layers named `{prefix}_0`, `{prefix}_1`, ..."""
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((inputs,))]
    for i, width in enumerate(widths):
        last = i == len(widths) - 1
        layers.append(keras.layers.Dense(width, activation=None if last else "tanh",
                                         name=f"{prefix}_{i}"))
    return keras.Sequential(layers)


def residual(*, seed=0):
    """stem -> [block_a -> block_b, + stem] -> head: a cut inside the block is crossed twice."""
    keras.utils.set_random_seed(seed)
    x = keras.Input((8,))
    stem = keras.layers.Dense(16, activation="tanh", name="stem")(x)
    a = keras.layers.Dense(16, activation="tanh", name="block_a")(stem)
    b = keras.layers.Dense(16, name="block_b")(a)
    added = keras.layers.Add(name="add")([stem, b])
    head = keras.layers.Dense(1, name="head")(added)
    return keras.Model(x, head)


def with_batch_norm(*, seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, name="d0"),
                             keras.layers.BatchNormalization(name="bn"),
                             keras.layers.Dense(1, name="d1")])


class Wait(keras.layers.Layer):
    """Passes its input through after sleeping `seconds_per_row` for each row of it.

    A layer of known cost: the sleep takes no core, so a loaded machine can only add
    to it, and it runs in the forward pass only (nothing to differentiate).
    """

    def __init__(self, seconds_per_row, **kwargs):
        super().__init__(**kwargs)
        self.seconds_per_row = seconds_per_row

    def call(self, x):
        def wait(rows):
            time.sleep(self.seconds_per_row * len(rows))
            return np.zeros((), np.float32)

        waited = tf.numpy_function(wait, [x], tf.float32, stateful=True)
        return x + tf.reshape(waited, [])

    def compute_output_shape(self, shape):
        return shape
