"""The flattened layer graph of a Keras model: nested functional models opened into their layers.

A pipeline cuts a model between the calls of its layers. A task model (a backbone, then a
head) is a functional model holding a functional model: opened, its cut points are the
backbone's embeddings, blocks and norms. Several inputs and outputs, and any number of
tensors crossing a cut, are allowed: what a stage needs reaches it.

Design: docs/design.md#partitioning-a-model
"""

import dataclasses

import keras
import numpy as np

from mgpu_tf.compat import private
from mgpu_tf.compat import private_graph

__all__ = ["Step", "Unit", "FlatGraph", "bind", "dominant_unit", "flatten", "functional_graph", "param_bytes"]


@dataclasses.dataclass(frozen=True, eq=False)
class Step:
    """One call of `operation`, its arguments as Keras `node` recorded them; `inputs` maps
    the ids of the node's Keras tensors to the keys of their values, `outputs` are keys."""

    operation: object
    node: object
    inputs: tuple
    outputs: tuple

    def __call__(self, values, training=None):
        """Calls the operation on `values[key]`; returns its outputs as a flat list."""
        found = {ref: values[key] for ref, key in self.inputs}
        args, kwargs = self.node.arguments.fill_in(found)
        # As a functional model calls its layers: `training` overrides what was recorded.
        if training is not None and isinstance(self.operation, keras.layers.Layer):
            kwargs["training"] = training
        return keras.tree.flatten(self.operation(*args, **kwargs))


@dataclasses.dataclass(frozen=True, eq=False)
class Unit:
    """One layer call of the flattened graph, the grain of a stage. `param_bytes` counts
    the variables no earlier unit counted (a tied embedding counts where first called)."""

    name: str
    operation: object
    param_bytes: int
    step: Step


@dataclasses.dataclass(frozen=True, eq=False)
class FlatGraph:
    """A model's layer calls in topological order, nested functional models opened.

    Attributes:
        units: the `Unit`s in order.
        inputs: the keys of the model's flat inputs (`functional_graph(model).inputs`).
        outputs: the keys of its flat outputs.
        input_tensors, output_tensors: the model's flat input and output Keras tensors.
        input_struct, output_struct: their structures, as the model takes and returns them.
        producers: for each key, the index of the unit producing it (-1: a model input).
        last_use: for each key, the last unit reading it (`len(units)`: a model output).
        masked: the keys of values carrying a Keras mask, which no cut may drop.
    """

    units: tuple
    inputs: tuple
    outputs: tuple
    input_tensors: tuple
    output_tensors: tuple
    input_struct: object
    output_struct: object
    producers: dict
    last_use: dict
    masked: frozenset = frozenset()

    def atoms(self):
        """The number of units between cuts: every gap that no masked value crosses."""
        sizes, size = [], 0
        for gap in range(len(self.units)):
            size += 1
            if gap == len(self.units) - 1 or not self.masked_crossing(gap):
                sizes.append(size)
                size = 0
        return sizes

    def masked_crossing(self, gap):
        """The names of the units whose masked outputs cross gap `gap` (a cut would drop
        the mask)."""
        return tuple(dict.fromkeys(self.units[self.producers[key]].name
                                   for key in self.crossing(gap) if key in self.masked))

    def crossing(self, gap):
        """The keys whose values cross the cut after unit `gap`, in the order they were made."""
        return [key for key, made in self.producers.items()
                if made <= gap < self.last_use.get(key, -1)]

    def crossing_names(self, gap):
        """The names of the units (or "the model input") whose outputs cross gap `gap`."""
        names = []
        for key in self.crossing(gap):
            made = self.producers[key]
            names.append("the model input" if made < 0 else self.units[made].name)
        return tuple(dict.fromkeys(names))

    def param_bytes(self):
        """Bytes of all the model's variables used by its units."""
        return sum(unit.param_bytes for unit in self.units)


def param_bytes(variables):
    total = 0
    for weight in variables:
        count = int(np.prod([int(d) for d in weight.shape]))
        total += count * np.dtype(keras.backend.standardize_dtype(weight.dtype)).itemsize
    return total


def dominant_unit(graph, share):
    """`(unit, its share of the bytes)` when a unit holding layers of its own holds more than
    `share` of the graph's bytes, else None."""
    total = graph.param_bytes()
    unit = max(graph.units, key=lambda u: u.param_bytes)
    if not total or unit.param_bytes / total <= share:
        return None
    if not isinstance(unit.operation, keras.layers.Layer) or not private.nested_layers(
            unit.operation):
        return None
    return unit, unit.param_bytes / total


def functional_graph(model):
    """The functional model a Sequential or functional `model` runs, or None (subclassed)."""
    if isinstance(model, keras.Sequential):
        return private.sequential_graph(model)
    if private.is_functional(model):
        return model
    return None


def flatten(model):
    """Returns the `FlatGraph` of a built Sequential or functional model.

    Nested Sequential and functional models are opened when called on tensors alone
    (with no argument but `training`, and no mask), their inputs bound by structure as
    Keras binds them; any other layer, and a subclassed model, is one unit.

    Raises:
        TypeError: for a subclassed model, which has no layer graph.
    """
    graph = functional_graph(model)
    if graph is None:
        raise TypeError(
            "ModelParallel cuts Sequential and functional Keras models into stages; a "
            f"subclassed model has no layer graph to cut. Received: model={model!r} "
            f"({type(model).__name__}). Rebuild it with the functional API (keras.Input, "
            "then call the layers).")
    steps, masked = [], set()
    inputs = tuple(((), id(t)) for t in graph.inputs)
    bound = {id(t): key for t, key in zip(graph.inputs, inputs)}
    outputs = tuple(_expand(graph, (), bound, steps, masked))
    producers = {key: -1 for key in inputs}
    last_use = {}
    counted, units = set(), []
    for index, (step, name) in enumerate(steps):
        for _, key in step.inputs:
            last_use[key] = max(last_use.get(key, -1), index)
        for key in step.outputs:
            producers.setdefault(key, index)
        weights = [w for w in getattr(step.operation, "weights", None) or []
                   if id(w) not in counted]
        counted.update(id(w) for w in weights)
        units.append(Unit(name, step.operation, param_bytes(weights), step))
    for key in outputs:
        last_use[key] = len(units)
    return FlatGraph(tuple(units), inputs, outputs, tuple(graph.inputs), tuple(graph.outputs),
                     graph.input, graph.output, producers, last_use, frozenset(masked))


def _expand(graph, scope, bound, steps, masked):
    """Appends the steps of functional `graph` to `steps`; returns its outputs' keys.

    `bound` maps the ids of `graph`'s input tensors to the keys of their values; the
    tensors made inside are keyed `(scope, id)`, `scope` telling apart two calls of one
    nested model.
    """
    keys = dict(bound)
    for index, node in enumerate(private.functional_nodes(graph)):
        inner = _opened(node)
        if inner is not None:
            inner_graph, arguments = inner
            inner_bound = {id(t): keys[id(a)] for t, a in zip(inner_graph.inputs, arguments)}
            made = _expand(inner_graph, scope + (index,), inner_bound, steps, masked)
            keys.update((id(t), key) for t, key in zip(node.outputs, made))
            continue
        inputs = tuple((id(t), keys[id(t)]) for t in node.arguments.keras_tensors)
        outputs = tuple((scope, id(t)) for t in node.outputs)
        keys.update((id(t), key) for t, key in zip(node.outputs, outputs))
        masked.update(key for t, key in zip(node.outputs, outputs)
                      if private_graph.keras_mask(t) is not None)
        steps.append((Step(node.operation, node, inputs, outputs), node.operation.name))
    return [keys[id(t)] for t in graph.outputs]


def _opened(node):
    """`(functional graph, its flat arguments)` when the node's model can be opened, else None."""
    operation = node.operation
    if not isinstance(operation, keras.Model):
        return None
    graph = functional_graph(operation)
    if graph is None:
        return None
    args, kwargs = node.arguments.args, node.arguments.kwargs
    extra = set(kwargs) - {"training", "mask"}
    masks = keras.tree.flatten(kwargs.get("mask"))
    if len(args) != 1 or extra or any(m is not None for m in masks):
        return None
    arguments = bind(graph.input, graph.inputs, args[0])
    if arguments is None or len(arguments) != len(graph.inputs):
        return None
    for outer, inner in zip(arguments, graph.inputs):
        # Keras would convert or reshape these on the way in: leave the model whole.
        if not isinstance(outer, keras.KerasTensor) or outer.dtype != inner.dtype or len(
                outer.shape) != len(inner.shape):
            return None
    if len(node.outputs) != len(graph.outputs):
        return None
    return graph, arguments


def bind(struct, flat_inputs, value):
    """The flat list of `value`'s parts in the order of a model's `flat_inputs`, or None.

    Follows Keras' binding of a call's inputs to a functional model's: a dict by key, a
    dict given to a list of inputs by their names, anything else by its flattened order.
    """
    if isinstance(value, dict) and isinstance(struct, dict):
        if not set(struct) <= set(value):
            return None
        return keras.tree.flatten({k: value[k] for k in struct})
    if isinstance(value, dict):
        names = [t.name for t in flat_inputs]
        if not set(names) <= set(value):
            return None
        return [value[name] for name in names]
    flat = keras.tree.flatten(value)
    return flat if len(flat) == len(flat_inputs) else None
