"""Models with the `train_step` of Keras' guide "Customizing what happens in `fit()` with
TensorFlow", which log the loss through a metric, and their data."""

import keras
import numpy as np
import tensorflow as tf

__all__ = ["EPOCHS", "GLOBAL_BATCH", "KINDS", "TERMS", "build", "data"]

GLOBAL_BATCH = 16
EPOCHS = 2
# The sums behind a gradient of build(), batch rows aside: widths 8, 16, 1 forward and back.
TERMS = 2 * (8 + 16 + 1)


class ComputeLossStep(keras.Model):
    """The guide's first step: `compute_loss`, then each of `self.metrics` updated."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)
        self.optimizer.apply(gradients, trainable_vars)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


class TrackerStep(keras.Model):
    """The guide's lower-level step: a `keras.losses` loss and a `Mean` loss tracker."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")
        self.loss_fn = keras.losses.MeanSquaredError()

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.loss_fn(y, y_pred)
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)
        self.optimizer.apply(gradients, trainable_vars)
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae_metric]


class CompiledLossStep(keras.Model):
    """The guide's TensorFlow 2 step: `compiled_loss` (Keras 3 keeps it), a `Mean` tracker."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compiled_loss(y, y_pred, regularization_losses=self.losses)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        self.loss_tracker.update_state(loss)
        return {m.name: m.result() for m in self.metrics}

    @property
    def metrics(self):
        return [self.loss_tracker]


class ChangedLossStep(TrackerStep):
    """The lower-level step, its tracker given the loss plus a term: not the tensor Keras made."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.loss_fn(y, y_pred) + 0.0 * tf.reduce_sum(y_pred)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(gradients, self.trainable_variables)
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}


KINDS = {"compute_loss": ComputeLossStep, "tracker": TrackerStep, "compiled_loss": CompiledLossStep}


def build(kind):
    """A model of `KINDS[kind]` (or `ChangedLossStep` for `"changed"`), widths 8-16-1 from seed 0, compiled with SGD 0.05 (and mse and
    mae where Keras computes them)."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,))
    hidden = keras.layers.Dense(16, activation="tanh")(inputs)
    model = {**KINDS, "changed": ChangedLossStep}[kind](inputs, keras.layers.Dense(1)(hidden))
    if kind in ("tracker", "changed"):
        model.compile(optimizer=keras.optimizers.SGD(0.05))
    elif kind == "compiled_loss":
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    else:
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    return model


def data():
    """`(x, y)`: four global batches."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4 * GLOBAL_BATCH, 8)).astype("float32")
    return x, (np.sin(x).sum(axis=1, keepdims=True)).astype("float32")
