"""The problem the sharded-optimizer tests train: a tiny MLP, its data and three optimizers.

66 weights (not a multiple of 4), so the last replica's slice is padded. The tests in
process and the workers of `support.mw_sharded` train the same model on the same batches.
"""

import keras
import numpy as np
import tensorflow as tf

GLOBAL_BATCH = 16
STEPS = 4


def data():
    """`(x, y)`: `STEPS` global batches."""
    rng = np.random.RandomState(5)
    x = rng.normal(size=(GLOBAL_BATCH * STEPS, 5)).astype("float32")
    y = np.tanh(x[:, :3] + 0.3 * x[:, 3:4]).astype("float32")
    return x, y


def batches(x, y):
    """The global batches in order, cut per replica by tf.distribute (DATA sharding)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).with_options(options)


def make_optimizer(name):
    """SGD with momentum, Adam, or AdamW with a schedule and the biases excluded from decay."""
    if name == "sgd":
        return keras.optimizers.SGD(0.05, momentum=0.9)
    if name == "adam":
        return keras.optimizers.Adam(0.02)
    schedule = keras.optimizers.schedules.ExponentialDecay(0.02, decay_steps=2, decay_rate=0.5)
    optimizer = keras.optimizers.AdamW(schedule, weight_decay=0.1)
    optimizer.exclude_from_weight_decay(var_names=["bias"])
    return optimizer


def build_model(optimizer_name):
    """The compiled model, with the same initial weights every time."""
    rng = np.random.RandomState(3)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(7, activation="tanh"),
                              keras.layers.Dense(3)])
    model.set_weights([rng.normal(scale=0.5, size=w.shape).astype("float32")
                       for w in model.get_weights()])
    model.compile(make_optimizer(optimizer_name), "mse")
    return model


def train(strategy, optimizer_name, epochs=1):
    """The model trained under `strategy` (built in its scope) for `epochs` passes."""
    x, y = data()
    with strategy.scope():
        model = build_model(optimizer_name)
    model.fit(batches(x, y), epochs=epochs, shuffle=False, verbose=0)
    return model
