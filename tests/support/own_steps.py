"""A model with its own `train_step` and `test_step`, which log the loss `compute_loss` gives
them (`loss`) beside a loss they compute by hand (`hand_loss`), and its data."""

import keras
import numpy as np
import tensorflow as tf

__all__ = ["GLOBAL_BATCH", "EPOCHS", "TERMS", "OwnSteps", "build", "data"]

GLOBAL_BATCH = 16
EPOCHS = 2
# The sums behind a gradient of build(), batch rows aside: widths 8, 16, 1 forward and back.
TERMS = 2 * (8 + 16 + 1)


class OwnSteps(keras.Sequential):
    """Keras' "customizing what happens in fit" step: the loss from `compute_loss`."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        return {"loss": loss, "hand_loss": tf.reduce_mean(tf.square(y - y_pred))}

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        return {"loss": self.compute_loss(x=x, y=y, y_pred=y_pred),
                "hand_loss": tf.reduce_mean(tf.square(y - y_pred))}


def build():
    """An `OwnSteps` of widths 8-16-1 from seed 0, compiled (SGD 0.05, mse)."""
    keras.utils.set_random_seed(0)
    model = OwnSteps([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"),
                      keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return model


def data():
    """`(x, y)`: four global batches."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4 * GLOBAL_BATCH, 8)).astype("float32")
    return x, (np.sin(x).sum(axis=1, keepdims=True)).astype("float32")
