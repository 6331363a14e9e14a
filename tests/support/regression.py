"""The workers' training data in the resume, elastic and ring tests: a linear regression."""

import numpy as np
import tensorflow as tf

import mgpu_tf


def sharded(strategy, examples, features, global_batch, shuffle_seed):
    """`examples` rows of a fixed linear map of `features` inputs, sharded for `strategy`."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((examples, features)).astype("float32")
    y = (x @ rng.standard_normal((features, 1))).astype("float32")
    return mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy,
                                 global_batch, shuffle_seed=shuffle_seed)


def compiled_model(strategy, features, width):
    """The workers' model, `features` -> `width` tanh units -> 1, seeded, compiled with SGD
    with momentum and the mean squared error under `strategy`."""
    import keras

    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential([keras.Input((features,)),
                                  keras.layers.Dense(width, activation="tanh"),
                                  keras.layers.Dense(1)])
        model = mgpu_tf.prepare_model(model, strategy)
        model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")
    return model
