"""Memory a training step needs on a device: parameters, gradients, optimizer slots, activations.

Design: docs/design.md#memory-estimates
"""

import dataclasses
import math

import keras
import tensorflow as tf

from mgpu_tf.model_parallel import balance as balance_lib
from mgpu_tf.model_parallel import graph as graph_lib
from mgpu_tf.model_parallel import recompute as recompute_lib
from mgpu_tf.model_parallel import stage as stage_lib
from mgpu_tf.planner import liveness
from mgpu_tf.planner.inputs import OPTIMIZER_SLOTS, parse_size, slots_by_name

__all__ = [
    "RUNTIME_SHARE",
    "Footprint",
    "ModelMemory",
    "parse_size",
    "format_size",
    "optimizer_slots",
    "shardable",
    "sharded_footprint",
    "input_shapes",
    "measure_graph",
    "measure_model",
]

# What a device holds beyond the tensors a step keeps alive (its allocator's rounding and
# fragmentation, the kernels' workspaces), as a share of those tensors: calibrated on published
# GPU figures for ResNet-50 and BERT (docs/planner.md#calibration-against-published-figures).
RUNTIME_SHARE = 0.3


def format_size(nbytes):
    """Formats bytes with a binary unit: `format_size(3 * 2**30)` is `"3.00 GiB"`."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{int(nbytes)} B"


def optimizer_slots(optimizer):
    """Slot variables the optimizer (or its name) keeps per weight (Adam: 2; SGD with momentum: 1).

    Raises `ValueError` for an optimizer name it does not know.
    """
    if isinstance(optimizer, str):
        return slots_by_name(optimizer)
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError("`optimizer` must be a name or a Keras optimizer. "
                        f"Received: optimizer={optimizer!r}")
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
    name = type(optimizer).__name__.lower()
    slots = OPTIMIZER_SLOTS.get(name, 2)
    if name == "sgd":
        slots = int(bool(getattr(optimizer, "momentum", 0)))
    elif name == "rmsprop":
        slots = 1 + int(bool(optimizer.momentum)) + int(bool(optimizer.centered))
    elif name in ("adam", "adamw") and getattr(optimizer, "amsgrad", False):
        slots = 3
    return slots


def shardable(optimizer):
    """True when `shard_optimizer_state` can cut the optimizer's (or its name's) slots."""
    from mgpu_tf.comm.sharded_state import ELEMENTWISE

    if isinstance(optimizer, str):
        return optimizer.strip().lower() in {n.lower() for n in ELEMENTWISE}
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
    return type(optimizer).__name__ in ELEMENTWISE and optimizer_slots(optimizer) > 0


def sharded_footprint(footprint, replicas, slots):
    """`footprint` of data parallelism with `shard_optimizer_state` over `replicas`.

    Each replica keeps the slots of its slice and the slice's weights, and updates only its
    slice; the all-gathered weights take the place of the gradients, freed by then.
    """
    share = -(-footprint.gradients // replicas)
    return dataclasses.replace(footprint, optimizer=(slots + 1) * share,
                               workspace=(slots + 1) * share)


@dataclasses.dataclass(frozen=True)
class Footprint:
    """Bytes one device holds for one training step.

    Attributes:
        params, gradients, optimizer: the weights, their gradients, the optimizer's slots.
        activations: what the forward pass keeps for the backward pass, and the input batch.
        workspace: the temporaries of updating the largest weight.
        temporaries: the most that tensors alive at once add to the activations.
        runtime: what the device's runtime adds to those (`RUNTIME_SHARE` of them).
    """

    params: int
    gradients: int
    optimizer: int
    activations: int
    workspace: int = 0
    temporaries: int = 0
    runtime: int = 0

    @property
    def total(self):
        return (self.params + self.gradients + self.optimizer
                + max(self.activations + self.temporaries + self.runtime, self.workspace))

    def __str__(self):
        return (f"{format_size(self.total)} (params {format_size(self.params)}, gradients "
                f"{format_size(self.gradients)}, optimizer {format_size(self.optimizer)}, "
                f"activations {format_size(self.activations)}, temporaries "
                f"{format_size(self.temporaries)}, runtime {format_size(self.runtime)}, update "
                f"workspace {format_size(self.workspace)})")


class ModelMemory:
    """A model's memory per stage of any cut of its flattened graph, by `measure_model`.

    `footprints(batch, stages)` cuts as `ModelParallel(balance="params")`,
    `stage_footprints(counts, batch)` as told. A stage is traced when first asked for, at two
    batch sizes; its figures are linear in the batch.
    """

    def __init__(self, graph, specs, sample_batch):
        self.graph = graph
        self._specs = specs  # at sample_batch and sample_batch + 1: {key: tf.TensorSpec}
        self._sample_batch = sample_batch
        self._traced = {}
        self.trainable_bytes, self.largest_weight_bytes = [], []
        counted = set()
        for unit in graph.units:
            weights = [w for w in getattr(unit.operation, "trainable_weights", None) or []
                       if id(w) not in counted]  # a tied weight counts where first used
            counted.update(id(w) for w in weights)
            sizes = [graph_lib.param_bytes([w]) for w in weights]
            self.trainable_bytes.append(sum(sizes))
            self.largest_weight_bytes.append(max(sizes + [0]))

    @property
    def max_stages(self):
        """The most stages the model can be cut into (one per run of layers no mask crosses)."""
        return len(self.graph.atoms())

    def stage_counts(self, stages):
        """Layers per stage, as `ModelParallel(balance="params")` cuts them."""
        return balance_lib.balance_by_params(self.graph, stages)

    def footprints(self, batch, stages=1, slots=2, recompute="never", microbatches=1):
        """Returns one `Footprint` per stage for `batch` examples per pipeline per step.

        `slots` is optimizer slots per weight; `recompute` and `microbatches` are `ModelParallel`'s.
        """
        counts = [len(self.graph.units)] if stages == 1 else self.stage_counts(stages)
        return self.stage_footprints(counts, batch, slots, recompute, microbatches)

    def stage_footprints(self, counts, batch, slots=2, recompute="never", microbatches=1):
        """One `Footprint` per stage of `counts` layers each: what enters a stage is kept for
        every micro-batch, what its backward reads for each, or, recomputing, for one."""
        mode = recompute_lib.check_recompute(recompute)
        replay = microbatches > 1 and mode != recompute_lib.Recompute.NEVER
        rows = math.ceil(batch / microbatches) if replay else batch
        out, start = [], 0
        for stage in stage_lib.cut(self.graph, counts).stages:
            units = range(start, start + len(stage.units))
            traced = self._trace(start, stage)
            activations = _at(self._bytes(stage.entering), batch) + _at(traced["saved"], rows)
            # The loss reads the model's outputs (unless the backward pass keeps them anyway).
            outputs = [k for k, kept in zip(stage.leaving, traced["leaving_saved"])
                       if k in self.graph.outputs and not kept]
            activations += _at(self._bytes(outputs), batch)
            temporaries = _at(traced["temporaries"], rows)
            params = sum(self.graph.units[u].param_bytes for u in units)
            trainable = sum(self.trainable_bytes[u] for u in units)
            largest = max([self.largest_weight_bytes[u] for u in units] + [0])
            out.append(Footprint(params, trainable, slots * trainable, int(activations),
                                 (slots + 1) * largest, int(temporaries),
                                 int(RUNTIME_SHARE * (activations + temporaries))))
            start += len(stage.units)
        return out

    def _bytes(self, keys):
        """`(bytes per example, fixed bytes)` of the values `keys`."""
        small, large = (sum(_nbytes(specs[k]) for k in keys) for specs in self._specs)
        return _linear(small, large, self._sample_batch)

    def _trace(self, start, stage):
        key = (start, len(stage.units))
        if key not in self._traced:
            small, large = (liveness.stage_memory(stage, [specs[k] for k in stage.entering])
                            for specs in self._specs)
            self._traced[key] = {
                "saved": _linear(small.saved, large.saved, self._sample_batch),
                "temporaries": _linear(small.temporaries, large.temporaries,
                                       self._sample_batch),
                "leaving_saved": small.leaving_saved}
        return self._traced[key]


def _linear(small, large, batch):
    """`(per example, fixed)` of a figure that is `small` at `batch` and `large` at `batch + 1`."""
    grown = max(0, large - small)
    return grown, max(0, small - batch * grown)


def _at(figure, batch):
    return figure[0] * batch + figure[1]


def _nbytes(spec):
    if spec.dtype in (tf.resource, tf.variant) or not spec.shape.is_fully_defined():
        return 0
    return spec.shape.num_elements() * spec.dtype.size


def _value_specs(graph, flat):
    """The `tf.TensorSpec` of every value of `graph`, run on the flat inputs `flat`."""
    values = dict(zip(graph.inputs, flat))
    specs = {key: tf.TensorSpec(v.shape, v.dtype) for key, v in values.items()}
    for index, unit in enumerate(graph.units):
        for key, value in zip(unit.step.outputs, unit.step(values, training=False)):
            values[key] = value
            specs[key] = tf.TensorSpec(value.shape, value.dtype)
        for key in [k for k in values if graph.last_use.get(k, -1) <= index]:
            del values[key]  # no later layer reads it
    return specs


def measure_graph(graph, input_shapes, *, sample_batch=2):
    """Measures the memory of a flattened graph (`model_parallel.graph.flatten`); returns a
    `ModelMemory`. `input_shapes` gives each flat input's shape besides the batch."""
    specs = []
    for rows in (sample_batch, sample_batch + 1):
        flat = [tf.ones((rows,) + tuple(shape), keras.backend.standardize_dtype(t.dtype))
                for shape, t in zip(input_shapes, graph.input_tensors)]
        specs.append(_value_specs(graph, flat))
    return ModelMemory(graph, specs, sample_batch)


def input_shapes(model, sequence_length=None):
    """Each flat input's shape besides the batch, an open dimension `sequence_length` long
    (by default the model's preprocessor's, a KerasHub task's); `ValueError` without one."""
    graph = graph_lib.functional_graph(model)
    if sequence_length is None:
        sequence_length = getattr(getattr(model, "preprocessor", None), "sequence_length", None)
    shapes = []
    for tensor in graph.inputs if graph is not None else ():
        shape = tuple(tensor.shape[1:])
        if any(d is None for d in shape):
            if sequence_length is None:
                raise ValueError(
                    "The planner traces a batch through the model, and its input "
                    f"{tensor.name!r} has dimensions of unknown length besides the batch. "
                    f"Received: input shape {(None,) + shape}, sequence_length=None. Pass "
                    "sequence_length= (--sequence_length) for a text model's open "
                    "dimensions, or build the model with keras.Input(shape) of fixed "
                    "dimensions.")
            shape = tuple(sequence_length if d is None else d for d in shape)
        shapes.append(shape)
    return shapes


def measure_model(model, *, sample_batch=2, sequence_length=None):
    """Measures a model's memory by tracing its training step; returns a `ModelMemory`.

    The model is a built Sequential or functional model, several inputs and outputs and
    nested models (a KerasHub task) included (else `TypeError`). Its inputs' dimensions
    besides the batch must be known, or given by `sequence_length` (else `ValueError`).
    `sample_batch` is the smaller traced batch.

    Example:

    ```python
    memory = measure_model(model)
    memory.footprints(batch=64, stages=2, slots=2)  # [Footprint(...), Footprint(...)]
    ```
    """
    graph = graph_lib.flatten(model)
    return measure_graph(graph, input_shapes(model, sequence_length), sample_batch=sample_batch)
