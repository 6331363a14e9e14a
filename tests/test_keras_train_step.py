"""mgpu_tf.compat.keras_train_step: the copy of Keras' train step that XLA and hybrid steps run.

Each test trains a model whose `train_step` is that copy beside one that runs Keras'
own, from the same weights on the same batches, and compares weights and logs.
"""

import contextlib

import keras
import numpy as np
import pytest

import mgpu_tf
from mgpu_tf.compat import keras_train_step

BOUND = 1e-6


class CopiedStep(keras.Sequential):
    """A Sequential model whose train step is `keras_train_step.train_step`."""

    reduce = None

    def train_step(self, data):
        return keras_train_step.train_step(self, data, reduce=self.reduce)


def _layers():
    return [keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
            keras.layers.Dropout(0.0), keras.layers.Dense(1)]


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(24, 3)).astype("float32")
    return x, x @ np.array([[1.0], [-2.0], [0.5]], "float32"), rng.uniform(size=24)


def _train(model, learning_rate=0.1, epochs=2):
    x, y, weights = _data()
    model.compile(optimizer=keras.optimizers.SGD(learning_rate), loss="mse",
                  metrics=["mae"])
    history = model.fit(x, y, sample_weight=weights, batch_size=8, epochs=epochs,
                        shuffle=False, verbose=0)
    return model.get_weights(), history.history


def _pair(copied_class=CopiedStep, scope=None):
    """Keras' own model and the copy's, with the same initial weights."""
    keras.utils.set_random_seed(1)
    with scope or contextlib.nullcontext():
        own = keras.Sequential(_layers())
        copied = copied_class(_layers())
    keras_train_step.require(copied)
    copied.set_weights(own.get_weights())
    return own, copied


def _assert_same(first, second):
    (weights, logs), (other_weights, other_logs) = first, second
    for a, b in zip(weights, other_weights):
        np.testing.assert_allclose(a, b, rtol=BOUND, atol=BOUND)
    assert logs.keys() == other_logs.keys()
    for name in logs:
        np.testing.assert_allclose(logs[name], other_logs[name], rtol=BOUND)


def test_the_copy_trains_as_keras_own():
    own, copied = _pair()
    _assert_same(_train(own), _train(copied))


def test_reduce_changes_the_gradients_before_the_update():
    class Halved(CopiedStep):
        reduce = staticmethod(lambda gradients, loss: ([g / 2 for g in gradients], loss))

    own, copied = _pair(Halved)
    # Half the gradients at learning rate 0.1 is Keras' step at 0.05.
    _assert_same(_train(own, learning_rate=0.05), _train(copied, learning_rate=0.1))


def test_the_copy_logs_the_loss_of_all_replicas_under_a_strategy():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    own, copied = _pair(scope=strategy.scope())
    _assert_same(_train(own), _train(copied))


def test_require_refuses_a_model_without_the_names():
    with pytest.raises(keras_train_step.private.PrivateNameError,
                       match="through Keras' private `Layer._call_has_training_arg`"):
        keras_train_step.require(object())
