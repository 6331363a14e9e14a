"""Keras' metrics under a strategy of several replicas count each step once (the fix for
Keras 3.8-3.9, whose metric variables summed the old total once per replica each step)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.compat import metric_sums

X = np.linspace(-2.0, 2.0, 48, dtype="float32").reshape(24, 2)
Y = np.sin(X).sum(axis=1, keepdims=True).astype("float32")


def _model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(
        1, kernel_initializer=keras.initializers.Constant(0.5), bias_initializer="ones")])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    return model


@pytest.mark.parametrize("devices", [2, 4])
def test_evaluate_gives_the_mean_over_the_examples(devices):
    strategy = mgpu_tf.make_strategy("mirrored", devices=devices)
    with strategy.scope():
        model = _model()
    # Hand-computed: every weight 0.5, bias 1.
    errors = X.sum(axis=1, keepdims=True) * 0.5 + 1.0 - Y
    data = tf.data.Dataset.from_tensor_slices((X, Y)).batch(8)
    results = model.evaluate(data, verbose=0, return_dict=True)
    np.testing.assert_allclose(results["loss"], np.mean(errors ** 2), rtol=1e-6)
    np.testing.assert_allclose(results["mae"], np.mean(np.abs(errors)), rtol=1e-6)


def test_a_metric_adds_a_replicas_part_once():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        total = keras.metrics.Sum()

    @tf.function
    def step(value):
        strategy.run(lambda: total.update_state(value))

    for value in (1.0, 2.0, 3.0):
        step(tf.constant(value))
    assert float(total.result()) == 12.0  # each step's value from both replicas


@pytest.mark.parametrize("version, applies", [("3.7.0", False), ("3.8.0", True),
                                              ("3.9.2", True), ("3.10.0", False)])
def test_the_fix_is_for_the_versions_it_names(version, applies):
    assert metric_sums.metric_sum_fix_applies(version) is applies


def test_a_variable_outside_a_replica_step_keeps_keras_addition():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        variable = keras.Variable(np.float32(1.0), trainable=False, aggregation="sum")
    variable.assign_add(2.0)
    variable.assign_sub(0.5)
    assert float(variable.numpy()) == 2.5
