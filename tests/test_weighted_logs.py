"""What Keras shows with weighted shards: the figure mgpu_tf.data.replica_weights documents.

Every example's loss is 1 (a zero model, targets 1, mean squared error) and the
learning rate 0, so the true mean is 1 in every step.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf


def _shown(weights):
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)),
                                  keras.layers.Dense(1, kernel_initializer="zeros")])
        model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse", metrics=["mae"])
    x, y = np.ones((48, 3), "float32"), np.ones((48, 1), "float32")
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, 12,
                                 weights=weights)
    history = model.fit(data, epochs=1, verbose=0)
    return history.history["loss"][0], history.history["mae"][0]


def test_equal_shards_show_the_true_mean():
    assert _shown(None) == pytest.approx((1.0, 1.0), rel=1e-6)


def test_weighted_shards_show_r_sum_of_squared_shares_times_the_mean():
    # weights=[2, 1], global batch 12: replica batches of 8 and 4, so the loss shown is
    # R * sum_i b_i**2 / B**2 = 2 * (64 + 16) / 144 = 10/9; the metric stays the mean.
    assert _shown([2, 1]) == pytest.approx((10 / 9, 1.0), rel=1e-6)
