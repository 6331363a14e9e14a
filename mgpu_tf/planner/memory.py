"""Memory a training step needs on a device: parameters, gradients, optimizer slots, activations.

Design: docs/design.md#memory-estimates
"""

import dataclasses
import math

import keras
import numpy as np
import tensorflow as tf

from mgpu_tf.model_parallel import balance as balance_lib
from mgpu_tf.model_parallel import partition
from mgpu_tf.model_parallel import recompute as recompute_lib
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
    """A model's memory, per layer, ready to be summed over any device's share.

    Made by `measure_model`; `footprints(batch, stages)` gives each stage's footprint.
    Per unit (layer), `saved` and `temporaries` are `(bytes per example, fixed bytes)`.
    """

    def __init__(self, graph, trainable_bytes, largest_weight_bytes, saved, temporaries,
                 input_bytes, output_bytes):
        self.graph = graph
        self.trainable_bytes = trainable_bytes
        self.largest_weight_bytes = largest_weight_bytes
        self.saved = saved
        self.temporaries = temporaries
        self.input_bytes_per_example = input_bytes
        self.output_bytes_per_example = output_bytes

    @property
    def max_stages(self):
        """The most stages the model can be cut into (one tensor crossing each cut)."""
        return len(self.graph.atoms())

    def stage_counts(self, stages):
        """Layers per stage, as `ModelParallel(balance="params")` cuts them."""
        return balance_lib.balance_by_params(self.graph, stages)

    def entering_bytes_per_example(self, start):
        """Bytes per example of the tensor entering a stage that starts at unit `start`."""
        if start == 0:
            return self.input_bytes_per_example
        return _per_example(self.graph.tensors[start - 1])

    def footprints(self, batch, stages=1, slots=2, recompute="never", microbatches=1):
        """Returns one `Footprint` per stage for `batch` examples per pipeline per step.

        `slots` is optimizer slots per weight; `recompute` and `microbatches` are `ModelParallel`'s.
        """
        mode = recompute_lib.check_recompute(recompute)
        replay = microbatches > 1 and mode != recompute_lib.Recompute.NEVER
        rows = math.ceil(batch / microbatches) if replay else batch
        counts = [len(self.graph.units)] if stages == 1 else self.stage_counts(stages)
        out, start = [], 0
        for k, count in enumerate(counts):
            units = range(start, start + count)
            params = sum(self.graph.units[u].param_bytes for u in units)
            trainable = sum(self.trainable_bytes[u] for u in units)
            # Saved tensors pile up through the forward pass; each unit's temporaries come
            # on top of what the units up to it saved (later units' are freed by then).
            # Recomputing, the stage keeps its input for every micro-batch and the rest
            # for one micro-batch of `rows` examples.
            if replay:
                activations = self.entering_bytes_per_example(start) * (batch - rows)
                activations += self.input_bytes_per_example * rows if k == 0 else 0
            else:
                activations = self.input_bytes_per_example * batch if k == 0 else 0
            peak = 0
            for u in units:
                activations += self.saved[u][0] * rows + self.saved[u][1]
                peak = max(peak, activations + self.temporaries[u][0] * rows
                           + self.temporaries[u][1])
            if k == len(counts) - 1:  # the loss reads the model's output
                activations += self.output_bytes_per_example * batch
            temporaries = max(0, peak - activations)
            largest = max([self.largest_weight_bytes[u] for u in units] + [0])
            out.append(Footprint(params, trainable, slots * trainable, int(activations),
                                 (slots + 1) * largest, int(temporaries),
                                 int(RUNTIME_SHARE * (activations + temporaries))))
            start += count
        return out


def _spec(tensor, batch):
    dtype = tf.as_dtype(keras.backend.standardize_dtype(tensor.dtype))
    return tf.TensorSpec((batch,) + tuple(tensor.shape[1:]), dtype)


def _per_example(tensor):
    return int(np.prod(tensor.shape[1:])) * _spec(tensor, 1).dtype.size


def measure_model(model, *, sample_batch=2):
    """Measures a model's memory by tracing its training step; returns a `ModelMemory`.

    The model must be one `ModelParallel` can cut, with a known input shape besides the batch
    (else `TypeError` or `ValueError`). `sample_batch` is the smaller traced batch.

    Example:

    ```python
    memory = measure_model(model)
    memory.footprints(batch=64, stages=2, slots=2)  # [Footprint(...), Footprint(...)]
    ```
    """
    graph = partition.analyse(model)
    shape = tuple(graph.input.shape[1:])
    if any(d is None for d in shape):
        raise ValueError(
            "The planner traces a batch through the model, and its input shape has unknown "
            f"dimensions besides the batch. Received: input shape {(None,) + shape}. Build the "
            "model with keras.Input(shape) of fixed dimensions.")
    trainable, largest = [], []
    for unit in graph.units:
        weights = getattr(unit.operation, "trainable_weights", None) or []
        sizes = [int(np.prod(w.shape)) * np.dtype(keras.backend.standardize_dtype(
            w.dtype)).itemsize for w in weights]
        trainable.append(sum(sizes))
        largest.append(max(sizes + [0]))
    atoms = graph.atoms()
    segments = partition.segment_models(graph, atoms)
    small, large = ([liveness.segment_memory(s, _spec(s.inputs[0], b), _spec(s.outputs[0], b))
                     for s in segments] for b in (sample_batch, sample_batch + 1))
    saved, temporaries = [], []
    for k, (segment, size) in enumerate(zip(segments, atoms)):
        a, b = small[k], large[k]
        boundary = 0
        if k > 0 and (a.input_saved or small[k - 1].output_saved):
            boundary = _per_example(segment.inputs[0])
        for name, value in (("saved", saved), ("temporaries", temporaries)):
            grown = max(0, getattr(b, name) - getattr(a, name))
            fixed = max(0, getattr(a, name) - sample_batch * grown)
            value += [(grown + (boundary if name == "saved" else 0), fixed)] \
                + [(0, 0)] * (size - 1)
    return ModelMemory(graph, trainable, largest, saved, temporaries,
                       _per_example(graph.input), _per_example(graph.output))
