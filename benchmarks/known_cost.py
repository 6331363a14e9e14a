"""A Keras layer of known cost, for the pipeline benchmark and the balance tests.

`Wait` sleeps a fixed time per row of its input in the forward pass: the sleep takes no
core, so a loaded machine can only add to it, and it has nothing to differentiate.
"""

import time

import keras
import numpy as np
import tensorflow as tf

__all__ = ["Wait"]


class Wait(keras.layers.Layer):
    """Passes its input through after sleeping `seconds_per_row` for each row of it.

    Args:
        seconds_per_row: the sleep for each row.
        stateful: mark the sleep stateful, so that `tf.function` runs the waits of a model
            one after another; stateless waits may overlap. Defaults to `True`.
    """

    def __init__(self, seconds_per_row, *, stateful=True, **kwargs):
        super().__init__(**kwargs)
        self.seconds_per_row = seconds_per_row
        self.stateful_wait = stateful

    def call(self, x):
        def wait(rows):
            time.sleep(self.seconds_per_row * len(rows))
            return np.zeros((), np.float32)

        # Fed the batch itself, so Grappler cannot fold it into a constant.
        waited = tf.numpy_function(wait, [x], tf.float32, stateful=self.stateful_wait)
        return x + tf.reshape(waited, [])

    def compute_output_shape(self, shape):
        return shape
