"""Stages: consecutive units of a flattened graph, run as one piece on one device.

Design: docs/design.md#partitioning-a-model
"""

import dataclasses

import keras

from mgpu_tf.model_parallel import graph as graph_lib

__all__ = ["Stage", "Cut", "cut", "bind_inputs", "check_masks", "pack_outputs"]


@dataclasses.dataclass(frozen=True, eq=False)
class Stage:
    """A run of units: what enters it, what it runs, what leaves it.

    Attributes:
        units: its `graph.Unit`s, in order.
        entering: the keys of the values it reads from earlier stages or the model's inputs,
            in the order of first use; each is sent to its device once.
        leaving: the keys of the values it makes that later stages or the model's outputs read.
    """

    units: tuple
    entering: tuple
    leaving: tuple

    def __call__(self, entering, training=None):
        """Runs the units on the `entering` values (a list); returns the leaving ones."""
        values = dict(zip(self.entering, entering))
        for unit in self.units:
            values.update(zip(unit.step.outputs, unit.step(values, training)))
        return [values[key] for key in self.leaving]

    @property
    def layers(self):
        """The layers (and operations) it calls, each once, in order of first call."""
        return list({id(u.operation): u.operation for u in self.units}.values())

    @property
    def variables(self):
        """The variables of its layers, each once."""
        seen = {}
        for layer in self.layers:
            for variable in getattr(layer, "variables", None) or []:
                seen.setdefault(id(variable), variable)
        return list(seen.values())


@dataclasses.dataclass(frozen=True, eq=False)
class Cut:
    """A flattened graph cut into `stages`; `input_stage` is the first stage reading each
    flat input (where it is split), `output_stage` the stage making each output."""

    stages: tuple
    inputs: tuple
    outputs: tuple
    input_stage: tuple
    output_stage: tuple


def cut(graph, counts):
    """Cuts `graph` (a `graph.FlatGraph`) into stages of `counts` units each; returns a `Cut`."""
    stages, start = [], 0
    stage_of = {key: -1 for key in graph.inputs}
    for k, count in enumerate(counts):
        units = graph.units[start:start + count]
        made = {key for unit in units for key in unit.step.outputs}
        entering = []
        for unit in units:
            for _, key in unit.step.inputs:
                if key not in made and key not in entering:
                    entering.append(key)
        end = start + count
        leaving = [key for key in dict.fromkeys(k2 for u in units for k2 in u.step.outputs)
                   if graph.last_use.get(key, -1) >= end]
        for key in made:
            stage_of.setdefault(key, k)
        stages.append(Stage(tuple(units), tuple(entering), tuple(leaving)))
        start = end
    first_reader = []
    for key in graph.inputs:
        readers = [k for k, s in enumerate(stages) if key in s.entering]
        first_reader.append(readers[0] if readers else 0)
    output_stage = tuple(max(stage_of.get(key, 0), 0) for key in graph.outputs)
    return Cut(tuple(stages), graph.inputs, graph.outputs, tuple(first_reader), output_stage)


def check_masks(graph, counts):
    """Raises a ValueError naming the layers when a cut of `counts` would drop a mask."""
    gap = -1
    for stage, count in enumerate(counts[:-1]):
        gap += count
        names = graph.masked_crossing(gap)
        if names:
            raise ValueError(
                f"The cut after layer {graph.units[gap].name!r} (between stage {stage} and "
                f"stage {stage + 1}) would drop the Keras mask of the output of "
                f"{', '.join(map(repr, names))}, which only rides on the tensor. Received: "
                f"balance={list(counts)!r}. Cut where no masked tensor crosses, pass the mask "
                "as a model input (as KerasHub's padding_mask), or use an automatic balance.")


def bind_inputs(graph, inputs):
    """The model's flat inputs from `inputs` as the model takes them, as tensors.

    Raises `ValueError` when `inputs` does not match the model's inputs.
    """
    flat = graph_lib.bind(graph.input_struct, graph.input_tensors, inputs)
    if flat is None and len(graph.input_tensors) == 1 and not isinstance(inputs, (dict, list,
                                                                                  tuple)):
        flat = [inputs]
    if flat is None:
        names = [t.name for t in graph.input_tensors]
        raise ValueError(
            f"The model takes {len(names)} inputs ({', '.join(names)}); the inputs given "
            f"do not match them. Received: {_describe(inputs)}. Pass them as the model "
            "takes them (a dict keyed by input name, or a list in order).")
    out = []
    for value, reference in zip(flat, graph.input_tensors):
        value = keras.ops.convert_to_tensor(value, dtype=reference.dtype)
        out.append(_adjust_rank(value, reference))
    return out


def _adjust_rank(value, reference):
    """Squeezes or adds a last axis of 1, as a functional model does with its inputs."""
    rank, want = len(value.shape), len(reference.shape)
    if rank == want + 1 and value.shape[-1] == 1:
        return keras.ops.squeeze(value, axis=-1)
    if rank == want - 1 and reference.shape[-1] == 1:
        return keras.ops.expand_dims(value, axis=-1)
    return value


def pack_outputs(graph, flat):
    packed = keras.tree.pack_sequence_as(graph.output_struct, list(flat))
    # A functional model returns a lone output bare.
    if isinstance(packed, (list, tuple)) and len(packed) == 1:
        return packed[0]
    return packed


def _describe(inputs):
    if isinstance(inputs, dict):
        return f"a dict with keys {sorted(inputs)}"
    if isinstance(inputs, (list, tuple)):
        return f"a {type(inputs).__name__} of {len(inputs)}"
    return f"one tensor of shape {tuple(getattr(inputs, 'shape', ()))}"
