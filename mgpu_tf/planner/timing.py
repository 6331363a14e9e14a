"""Measuring the compute of one training step on this machine, for the step-time prediction.

The step is timed on a copy of the model, so the user's model and optimizer are untouched.
"""

import time

import keras
import numpy as np

from mgpu_tf.model_parallel import graph as graph_lib
from mgpu_tf.planner import memory

__all__ = ["measure_step_seconds"]


def _fresh_optimizer(optimizer):
    if isinstance(optimizer, str):
        return keras.optimizers.get(optimizer)
    return type(optimizer).from_config(optimizer.get_config())


def measure_step_seconds(model, batch, optimizer="adam", *, repeats=5, warmup=2,
                         sequence_length=None):
    """Median seconds of one forward, backward and optimizer update on `batch` examples.

    `model` is a built Sequential or functional Keras model (several inputs and outputs
    allowed); `sequence_length` fills its inputs' open dimensions (`memory.input_shapes`).
    `repeats` steps are timed after `warmup` untimed ones, as in
    `measure_step_seconds(model, 64, "adam")`.
    """
    shapes = memory.input_shapes(model, sequence_length)
    copy = keras.models.clone_model(model)
    # A clone of a compiled model (a KerasHub task compiles itself) keeps its metrics
    # unless told otherwise.
    copy.compile(optimizer=_fresh_optimizer(optimizer), loss="mse", metrics=[],
                 weighted_metrics=[])
    graph = graph_lib.functional_graph(model)
    flat = [np.ones((batch,) + shape, keras.backend.standardize_dtype(t.dtype))
            for shape, t in zip(shapes, graph.inputs)]
    x = keras.tree.pack_sequence_as(graph.input, flat)
    y = keras.tree.map_structure(lambda out: np.zeros(out.shape, "float32"),
                                 copy(x, training=False))
    for _ in range(warmup):
        copy.train_on_batch(x, y)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        copy.train_on_batch(x, y)
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds))
