"""Measuring the compute of one training step on this machine, for the step-time prediction.

The step is timed on a copy of the model, so the user's model and optimizer are untouched.
"""

import time

import keras
import numpy as np

__all__ = ["measure_step_seconds"]


def _fresh_optimizer(optimizer):
    if isinstance(optimizer, str):
        return keras.optimizers.get(optimizer)
    return type(optimizer).from_config(optimizer.get_config())


def measure_step_seconds(model, batch, optimizer="adam", *, repeats=5, warmup=2):
    """Median seconds of one forward, backward and optimizer update on `batch` examples.

    `model` is a built Keras model of one input and one output; `repeats` steps are timed
    after `warmup` untimed ones, as in `measure_step_seconds(model, 64, "adam")`.
    """
    copy = keras.models.clone_model(model)
    copy.compile(optimizer=_fresh_optimizer(optimizer), loss="mse")
    x = np.zeros((batch,) + tuple(model.inputs[0].shape[1:]),
                 keras.backend.standardize_dtype(model.inputs[0].dtype))
    y = np.zeros((batch,) + tuple(model.outputs[0].shape[1:]), "float32")
    for _ in range(warmup):
        copy.train_on_batch(x, y)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        copy.train_on_batch(x, y)
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds))
