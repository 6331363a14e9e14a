"""Partitioners: how many consecutive layers each stage gets.

Design: docs/design.md#balancing-stages
"""

import time

import keras
import numpy as np
import tensorflow as tf

from mgpu_tf.base.choice import Choice

__all__ = [
    "Balance",
    "partition",
    "balance_by_uniform",
    "balance_by_params",
    "balance_by_time",
    "measure_times",
    "sample_inputs",
]


class Balance(Choice):
    """The automatic ways to share layers among stages."""

    UNIFORM = "uniform"
    PARAMS = "params"
    TIME = "time"


def partition(weights, stages):
    """Splits `weights` into `stages` consecutive non-empty groups, minimising the largest sum.

    Returns the number of items in each group: `partition([4, 1, 1, 1, 1], 2)` is `[1, 4]`.
    """
    n = len(weights)
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(weights, dtype=np.float64))])
    inf = float("inf")
    # cost[k][j]: least possible heaviest group when the first j items form k groups.
    cost = np.full((stages + 1, n + 1), inf)
    split = np.zeros((stages + 1, n + 1), dtype=np.int64)
    cost[0][0] = 0.0
    for k in range(1, stages + 1):
        for j in range(k, n - (stages - k) + 1):
            for i in range(k - 1, j):
                heaviest = max(cost[k - 1][i], prefix[j] - prefix[i])
                # On ties keep the later cut: it leaves fewer items to the last groups.
                if heaviest <= cost[k][j]:
                    cost[k][j], split[k][j] = heaviest, i
    counts, j = [], n
    for k in range(stages, 0, -1):
        i = int(split[k][j])
        counts.append(j - i)
        j = i
    return counts[::-1]


def _by_atoms(graph, stages, unit_weights):
    """Partitions atoms weighted by the sum of their units' weights; returns unit counts."""
    atoms = graph.atoms()
    weights, start = [], 0
    for size in atoms:
        weights.append(sum(unit_weights[start:start + size]))
        start += size
    grouped = partition(weights, stages)
    counts, start = [], 0
    for group in grouped:
        counts.append(sum(atoms[start:start + group]))
        start += group
    return counts


def balance_by_uniform(graph, stages):
    """Gives each stage as equal a number of layers as the cuts allow.

    `graph` comes from `partition.analyse(model)`. Returns the number of layers in each
    stage, which `ModelParallel(balance=...)` takes.
    """
    return _by_atoms(graph, stages, [1] * len(graph.units))


def balance_by_params(graph, stages):
    """Gives each stage as equal a share of parameter bytes as the cuts allow.

    Returns the number of layers in each stage.
    """
    return _by_atoms(graph, stages, [unit.param_bytes for unit in graph.units])


def balance_by_time(graph, stages, sample, *, repeats=5):
    """Gives each stage as equal a share of forward and backward time as the cuts allow.

    Each atom is timed on its own, `repeats` times, on `sample` propagated through the atoms
    before it (torchgpipe's `balance_by_time`). Returns `(counts, unit_seconds)`: the layers
    of each stage, and `measure_times`'s seconds of each layer.
    """
    seconds = measure_times(graph, sample, repeats=repeats)
    return _by_atoms(graph, stages, seconds), seconds


def measure_times(graph, sample, *, repeats=5):
    """Measures the forward plus backward seconds of each atom on `sample`, best of `repeats`.

    `graph` is a `graph.FlatGraph` (every unit is an atom; `sample` is the model's flat
    inputs, or its one input) or a `partition.Graph` (`sample` its one input). Returns one
    figure per unit: an atom's time goes to its first unit, 0 to the others.
    """
    from mgpu_tf.model_parallel import graph as graph_lib

    if isinstance(graph, graph_lib.FlatGraph):
        return _measure_units(graph, sample, repeats)
    from mgpu_tf.model_parallel import partition as partition_lib

    atoms = graph.atoms()
    models = partition_lib.segment_models(graph, atoms)
    seconds = []
    x = tf.convert_to_tensor(sample)
    for atom, size in zip(models, atoms):
        step = tf.function(_forward_backward(lambda h: [atom(h[0], training=True)],
                                             atom.trainable_variables))
        y = step([x])  # traces and warms up
        seconds += [_best(step, [x], repeats)] + [0.0] * (size - 1)
        x = y[0]
    return seconds


def sample_inputs(graph, sample, rows):
    """The flat inputs of a `graph.FlatGraph` to time its layers on: `sample` as the model
    takes it, or `rows` rows of zeros when every input's shape is known."""
    from mgpu_tf.model_parallel import stage as stage_lib

    if sample is not None:
        return stage_lib.bind_inputs(graph, sample)
    flat = []
    for spec in graph.input_tensors:
        if any(d is None for d in spec.shape[1:]):
            raise ValueError(
                "balance='time' times the layers on a sample batch, and the model's input "
                f"shape has unknown dimensions besides the batch. Received: input "
                f"{spec.name!r} of shape {tuple(spec.shape)}, sample=None. Pass "
                "sample=<a batch of real inputs>.")
        shape = [rows] + [int(d) for d in spec.shape[1:]]
        flat.append(np.zeros(shape, dtype=keras.backend.standardize_dtype(spec.dtype)))
    return flat


def _measure_units(graph, sample, repeats):
    from mgpu_tf.model_parallel import stage as stage_lib

    cut = stage_lib.cut(graph, graph.atoms())
    flat = sample if isinstance(sample, (list, tuple)) else [sample]
    values = {key: tf.convert_to_tensor(x) for key, x in zip(graph.inputs, flat)}
    seconds = []
    for unit_stage in cut.stages:
        trainable = [v for v in unit_stage.variables if v.trainable]
        step = tf.function(_forward_backward(
            lambda h, s=unit_stage: s(h, training=True), trainable))
        entering = [values[key] for key in unit_stage.entering]
        out = step(entering)  # traces and warms up
        seconds.append(_best(step, entering, repeats))
        values.update(zip(unit_stage.leaving, out))
    return seconds


def _best(step, inputs, repeats):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        [y.numpy() for y in step(inputs)]
        best = min(best, time.perf_counter() - start)
    return best


def _forward_backward(run, variables):
    def step(inputs):
        inputs = list(inputs)
        with tf.GradientTape() as tape:
            floating = [x for x in inputs if x.dtype.is_floating]
            tape.watch(floating)
            outputs = run(inputs)
        targets = [y for y in outputs if y.dtype.is_floating]
        grads = tape.gradient(targets, floating + list(variables)) if targets else []
        # Depend on every gradient so none is pruned from the timed function.
        done = [tf.reduce_sum(g) for g in grads if g is not None and not isinstance(
            g, tf.IndexedSlices)]
        with tf.control_dependencies(done):
            return [tf.identity(y) for y in outputs]

    return step
