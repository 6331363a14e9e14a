"""The BatchNormalization problem of the moving-statistics tests, and its hand-computed answer.

Two replicas (or workers) see batches of different means, so copies of the moving statistics
that each move alone drift apart at once; a momentum of 0.5 makes that drift large.
"""

import keras
import numpy as np

from support import models

__all__ = ["GLOBAL_BATCH", "MOMENTUM", "STEPS", "EPOCHS", "TERMS", "data", "build",
           "averaged_statistics"]

GLOBAL_BATCH = 16
STEPS = 4  # an epoch
EPOCHS = 2
MOMENTUM = 0.5
# The sums behind a gradient of models.with_batch_norm(), batch rows aside: widths 8, 16, 1
# forward and back (support.tolerance).
TERMS = 2 * (8 + 16 + 1)


def data():
    """`(x, y)`: the second half of every global batch, a replica's share, shifted by 1."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS * GLOBAL_BATCH, 8)).astype("float32")
    x.reshape(STEPS, 2, GLOBAL_BATCH // 2, 8)[:, 1] += 1.0
    y = (np.sin(x).sum(axis=1, keepdims=True) + 0.1).astype("float32")
    return x, y


def build(*, frozen_first=False, synchronized=False):
    """`models.with_batch_norm()` with momentum `MOMENTUM`, compiled (SGD 0.05, mse).

    With `frozen_first`, its first Dense layer does not train, so the batch statistics
    are a function of the data alone (`averaged_statistics`).
    """
    model = models.with_batch_norm()
    model.get_layer("bn").momentum = MOMENTUM
    model.get_layer("bn").synchronized = synchronized
    model.get_layer("d0").trainable = not frozen_first
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return model


def averaged_statistics(x, kernel, bias, replicas=2):
    """`(moving_mean, moving_variance)` after `EPOCHS` epochs, in float64: each step moves
    them by the mean over `replicas` of each replica's batch mean and variance, of the
    frozen first layer's output `x @ kernel + bias`."""
    mean, variance = np.zeros(kernel.shape[1]), np.ones(kernel.shape[1])
    h = x.astype("float64") @ kernel.astype("float64") + bias.astype("float64")
    for _ in range(EPOCHS):
        for step in range(STEPS):
            batch = h[step * GLOBAL_BATCH:(step + 1) * GLOBAL_BATCH]
            parts = np.split(batch, replicas)
            mean = MOMENTUM * mean + (1 - MOMENTUM) * np.mean([p.mean(0) for p in parts], 0)
            variance = (MOMENTUM * variance
                        + (1 - MOMENTUM) * np.mean([p.var(0) for p in parts], 0))
    return mean, variance
