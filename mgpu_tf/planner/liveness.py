"""What a training step keeps alive: the tensors saved for the backward pass, and temporaries.

`lifetimes` follows each buffer of a traced forward and backward pass; `segment_memory` (one
input, one output) and `stage_memory` (a pipeline stage: several tensors entering and
leaving) read their figures from it.

Design: docs/design.md#memory-estimates
"""

import dataclasses

import tensorflow as tf

__all__ = ["Lifetimes", "SegmentMemory", "StageMemory", "lifetimes", "segment_memory",
           "stage_memory"]

# Ops whose outputs are the buffer of their first input, or not a new buffer at all.
_VIEWS = {"Identity", "IdentityN", "Reshape", "Squeeze", "ExpandDims", "StopGradient",
          "EnsureShape", "Snapshot"}
_EXTERNAL = {"Placeholder", "Const", "ReadVariableOp", "VarHandleOp", "_Arg", "NoOp",
             "VariableShape"}
# Ops that read only a tensor's shape: they do not keep its buffer alive.
_METADATA = {"Shape", "ShapeN", "Rank", "Size", "BroadcastGradientArgs"}


def _nbytes(tensor):
    if tensor.dtype in (tf.resource, tf.variant) or not tensor.shape.is_fully_defined():
        return 0
    return tensor.shape.num_elements() * tensor.dtype.size


def _root(tensor, roots):
    """The tensor whose buffer `tensor` uses (itself, unless it is a view)."""
    while tensor.op.type in _VIEWS and tensor.op.inputs:
        index = tensor.value_index if tensor.op.type == "IdentityN" else 0
        tensor = tensor.op.inputs[index]
    return roots.setdefault(tensor.ref(), tensor)


@dataclasses.dataclass(frozen=True)
class Lifetimes:
    """Each buffer of a traced training step: where it is made, last read, and its bytes.

    Positions are those of the ops, the forward pass first (`forward_end` is the first
    backward one). `born`, `last` and `size` are keyed by `key(tensor)`; the graph's
    outputs (the gradients, counted apart) and what comes from outside are not born here.
    """

    forward_end: int
    length: int
    born: dict
    last: dict
    size: dict
    roots: dict

    def key(self, tensor):
        """The key of the buffer `tensor` uses."""
        return _root(tensor, self.roots).ref()

    def read_backward(self, tensor):
        """Whether the backward pass reads the buffer of `tensor` (made here or given)."""
        return self.last.get(self.key(tensor), -1) >= self.forward_end

    def kept(self, key):
        """Whether the buffer `key` is made in the forward pass and read in the backward one."""
        return key in self.born and self.born[key] < self.forward_end <= self.last[key]

    def saved(self, excluded=()):
        """Bytes made in the forward pass and read in the backward one, but `excluded` keys."""
        return sum(self.size[k] for k in self.born if k not in excluded and self.kept(k))

    def temporaries(self, excluded=(), extra=()):
        """The most bytes of the other buffers (and the intervals `extra`, as `(first, last,
        bytes)`) alive at one position."""
        return self._peak([(self.born[k], self.last[k], self.size[k]) for k in self.born
                           if k not in excluded and not self.kept(k)] + list(extra))

    def peak(self):
        """The most bytes of all the buffers made here alive at one position: the saved ones
        are freed by the backward pass as it goes."""
        return self._peak([(self.born[k], self.last[k], self.size[k]) for k in self.born])

    def _peak(self, intervals):
        change = [0] * (self.length + 2)
        for first, final, nbytes in intervals:
            change[first] += nbytes
            change[final + 1] -= nbytes
        peak = alive = 0
        for delta in change:
            alive += delta
            peak = max(peak, alive)
        return peak


def lifetimes(graph, starts_backward):
    """The `Lifetimes` of the buffers of `graph`, a traced forward and backward pass, whose
    backward pass begins with the ops for which `starts_backward(op)` is true."""
    ops = graph.get_operations()
    backward = set()
    for op in ops:  # creation order is topological
        if starts_backward(op) or any(t.op in backward for t in op.inputs) or any(
                c in backward for c in op.control_inputs):
            backward.add(op)
    order = [op for op in ops if op not in backward] + [op for op in ops if op in backward]
    position = {op: i for i, op in enumerate(order)}
    roots, born, last, size = {}, {}, {}, {}
    for op in order:
        for tensor in op.outputs:
            root = _root(tensor, roots)
            if tensor is root and op.type not in _EXTERNAL:
                born[root.ref()] = position[op]
                last.setdefault(root.ref(), position[op])
                size[root.ref()] = _nbytes(root)
        if op.type in _METADATA:
            continue
        for tensor in op.inputs:
            key = _root(tensor, roots).ref()
            last[key] = max(last.get(key, -1), position[op])
    for tensor in graph.outputs:  # the gradients: counted as such, not as activations
        born.pop(_root(tensor, roots).ref(), None)
    return Lifetimes(len(order) - len(backward), len(order), born, last, size, roots)


@dataclasses.dataclass(frozen=True)
class SegmentMemory:
    """Bytes one traced segment keeps alive, for the traced batch.

    Attributes:
        saved: tensors made inside it and read by its backward pass (its output excluded).
        temporaries: the largest set of other tensors alive at once.
        input_saved, output_saved: whether the backward pass reads its input, its output.
    """

    saved: int
    temporaries: int
    input_saved: bool
    output_saved: bool


def _trace(segment, spec, out_spec):
    """The traced graph, its input, output and upstream-gradient tensors."""
    weights = list(segment.trainable_weights)
    watch_input = spec.dtype.is_floating
    traced = {}

    def step(x, dy):
        with tf.GradientTape() as tape:
            if watch_input:
                tape.watch(x)
            y = segment(x, training=True)
        traced.update(x=x, y=y, dy=dy)
        sources = ([x] if watch_input else []) + weights
        grads = tape.gradient(y, sources, output_gradients=dy)
        return [g for g in grads if g is not None]

    graph = tf.function(step).get_concrete_function(spec, out_spec).graph
    return graph, traced["x"], traced["y"], traced["dy"]


def segment_memory(segment, spec, out_spec):
    """Traces `segment` (one input, one output) forward and backward: its `SegmentMemory`.

    `spec` and `out_spec` are the `tf.TensorSpec`s of its input and output batches.
    """
    graph, x, y, dy = _trace(segment, spec, out_spec)
    life = lifetimes(graph, lambda op: any(t is dy for t in op.inputs))
    output = life.key(y)
    dy_interval = (life.forward_end, life.last.get(dy.ref(), life.forward_end), _nbytes(dy))
    return SegmentMemory(life.saved(excluded={output}),
                         life.temporaries(excluded={output}, extra=[dy_interval]),
                         life.read_backward(x), life.kept(output))


@dataclasses.dataclass(frozen=True)
class StageMemory:
    """Bytes one traced pipeline stage keeps alive, for the traced batch: `saved` (made and
    read by its backward pass), `temporaries` (the most that other tensors add to those, freed
    as the backward pass goes) and, per leaving value, whether `saved` holds it."""

    saved: int
    temporaries: int
    leaving_saved: tuple


def stage_memory(stage, specs):
    """Traces `stage` (a `model_parallel.stage.Stage`) forward and backward, on entering
    values of the `tf.TensorSpec`s `specs`, as the pipeline runs it: its `StageMemory`."""
    trainable = [v for v in stage.variables if v.trainable]
    traced = {}

    def step(*xs):
        with tf.GradientTape() as tape:
            floating = [x for x in xs if x.dtype.is_floating]
            tape.watch(floating)
            ys = stage(list(xs), training=True)
        targets = [y for y in ys if y.dtype.is_floating]
        dys = [tf.ones_like(y) for y in targets]
        traced.update(ys=ys, dys=dys)
        grads = tape.gradient(targets, floating + trainable, output_gradients=dys)
        return [g for g in grads if g is not None and not isinstance(g, tf.IndexedSlices)]

    graph = tf.function(step).get_concrete_function(*specs).graph
    starts = {dy.op for dy in traced["dys"]}
    life = lifetimes(graph, lambda op: op in starts)
    saved = life.saved()
    return StageMemory(saved, max(0, life.peak() - saved),
                       tuple(life.kept(life.key(y)) for y in traced["ys"]))
