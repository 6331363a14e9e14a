"""Small Keras models for the model-parallel and planner tests, each built from a seed."""

import keras

from benchmarks.known_cost import Wait  # noqa: F401 - the tests' layer of known cost

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
