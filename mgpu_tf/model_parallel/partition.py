"""A model's top-level layers and the cuts one tensor crosses, for `balance.measure_times`.

`ModelParallel` and the planner cut the flattened graph of `mgpu_tf.model_parallel.graph`.

Design: docs/design.md#partitioning-a-model
"""

import dataclasses

import keras
import numpy as np

from mgpu_tf.compat import private

__all__ = ["Unit", "Graph", "analyse", "check_cuts", "segment_models"]


@dataclasses.dataclass(frozen=True)
class Unit:
    """One top-level layer (or Keras operation) of the model, in topological order."""

    name: str
    operation: object
    param_bytes: int


@dataclasses.dataclass(frozen=True)
class Graph:
    """What the partitioners need to know about a model.

    Attributes:
        units: the units in topological order.
        crossing: for each gap `i` (after unit `i`), the names of the layers whose outputs cross it.
        tensors: for each valid gap, the one Keras tensor crossing it; `None` for gaps
            crossed by several.
        input, output: the model's input and output tensors.
    """

    units: tuple
    crossing: tuple
    tensors: tuple
    input: object
    output: object

    def atoms(self):
        """Returns the number of units in each atom (units between valid cuts)."""
        sizes, size = [], 0
        for gap in range(len(self.units)):
            size += 1
            if gap == len(self.units) - 1 or self.tensors[gap] is not None:
                sizes.append(size)
                size = 0
        return sizes


def _param_bytes(operation):
    weights = getattr(operation, "weights", None) or []
    total = 0
    for weight in weights:
        count = 1
        for dim in weight.shape:
            count *= int(dim)
        total += count * np.dtype(keras.backend.standardize_dtype(weight.dtype)).itemsize
    return total


def _functional(model):
    if isinstance(model, keras.Sequential):
        return private.sequential_graph(model)
    if private.is_functional(model):
        return model
    return None


def analyse(model):
    """Finds the units of a built Sequential or functional model and the tensors crossing each gap.

    Returns a `Graph`. Raises `TypeError` for another model, `ValueError` for several inputs
    or outputs, or a reused layer.
    """
    graph = _functional(model)
    if graph is None:
        raise TypeError(
            "ModelParallel cuts Sequential and functional Keras models into stages; a "
            f"subclassed model has no layer graph to cut. Received: model={model!r}. "
            "Rebuild it with the functional API (keras.Input, then call the layers)."
        )
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise ValueError(
            "ModelParallel needs a model with one input and one output, so that one "
            f"tensor enters the first stage and one leaves the last. Received: a model "
            f"with {len(graph.inputs)} inputs and {len(graph.outputs)} outputs."
        )
    nodes = private.functional_nodes(graph)
    seen = {}
    for node in nodes:
        if id(node.operation) in seen:
            raise ValueError(
                "ModelParallel needs each layer to be called once in the model; "
                f"layer {node.operation.name!r} is called more than once, so its weights "
                "would be needed on two stages. Received: a model that shares "
                f"{node.operation.name!r}. Wrap the shared part in one nested model."
            )
        seen[id(node.operation)] = node
    position = {}  # tensor id -> index of the unit producing it (-1: model input)
    last_use = {}  # tensor id -> last unit reading it (len(nodes): model output)
    tensor_of, producer_name = {}, {}
    model_input, model_output = graph.inputs[0], graph.outputs[0]
    position[id(model_input)] = -1
    tensor_of[id(model_input)] = model_input
    producer_name[id(model_input)] = "the model input"
    for index, node in enumerate(nodes):
        for tensor in node.arguments.keras_tensors:
            last_use[id(tensor)] = max(last_use.get(id(tensor), -1), index)
        for tensor in node.outputs:
            position[id(tensor)] = index
            tensor_of[id(tensor)] = tensor
            producer_name[id(tensor)] = node.operation.name
    last_use[id(model_output)] = len(nodes)
    crossing, tensors = [], []
    for gap in range(len(nodes)):
        across = [t for t in position
                  if position[t] <= gap < last_use.get(t, -1)]
        crossing.append(tuple(producer_name[t] for t in across))
        tensors.append(tensor_of[across[0]] if len(across) == 1 else None)
    units = tuple(Unit(n.operation.name, n.operation, _param_bytes(n.operation)) for n in nodes)
    return Graph(units, tuple(crossing), tuple(tensors), model_input, model_output)


def check_cuts(graph, counts):
    """Raises a ValueError naming the layers when a cut is crossed by several tensors."""
    gap = -1
    for stage, count in enumerate(counts[:-1]):
        gap += count
        if graph.tensors[gap] is None:
            names = graph.crossing[gap]
            raise ValueError(
                f"The cut after layer {graph.units[gap].name!r} (between stage {stage} and "
                f"stage {stage + 1}) is crossed by {len(names)} tensors, from layers "
                f"{', '.join(repr(n) for n in names)}; each cut must be crossed by one tensor. "
                f"Received: balance={list(counts)!r}. Move the cut so a whole block "
                "(for example a residual block) stays on one stage, or use an automatic "
                "balance ('params', 'time' or 'uniform'), which only cuts where one tensor "
                "crosses."
            )


def segment_models(graph, counts):
    """Builds one functional model per run of `counts` units, sharing the model's weights.

    Model `i` maps the tensor entering run `i` to the tensor leaving it; the cuts must be valid.
    """
    check_cuts(graph, counts)
    models, start, entering = [], 0, graph.input
    for index, count in enumerate(counts):
        end = start + count
        leaving = graph.output if end == len(graph.units) else graph.tensors[end - 1]
        models.append(keras.Model(entering, leaving, name=f"{graph.units[start].name}_segment"))
        start, entering = end, leaving
    return models
