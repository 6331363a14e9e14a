"""What a training step keeps alive: the tensors saved for the backward pass, and temporaries.

Design: docs/design.md#memory-estimates
"""

import dataclasses

import tensorflow as tf

__all__ = ["SegmentMemory", "segment_memory"]

# Ops whose outputs are the buffer of their first input, or not a new buffer at all.
_VIEWS = {"Identity", "IdentityN", "Reshape", "Squeeze", "ExpandDims", "StopGradient",
          "EnsureShape", "Snapshot"}
_EXTERNAL = {"Placeholder", "Const", "ReadVariableOp", "VarHandleOp", "_Arg", "NoOp",
             "VariableShape"}
# Ops that read only a tensor's shape: they do not keep its buffer alive.
_METADATA = {"Shape", "ShapeN", "Rank", "Size", "BroadcastGradientArgs"}


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


def _nbytes(tensor):
    if tensor.dtype in (tf.resource, tf.variant) or not tensor.shape.is_fully_defined():
        return 0
    return tensor.shape.num_elements() * tensor.dtype.size


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


def _root(tensor, roots):
    """The tensor whose buffer `tensor` uses (itself, unless it is a view)."""
    while tensor.op.type in _VIEWS and tensor.op.inputs:
        index = tensor.value_index if tensor.op.type == "IdentityN" else 0
        tensor = tensor.op.inputs[index]
    return roots.setdefault(tensor.ref(), tensor)


def segment_memory(segment, spec, out_spec):
    """Traces `segment` (one input, one output) forward and backward: its `SegmentMemory`.

    `spec` and `out_spec` are the `tf.TensorSpec`s of its input and output batches.
    """
    graph, x, y, dy = _trace(segment, spec, out_spec)
    ops = graph.get_operations()
    backward = set()
    for op in ops:  # creation order is topological
        if any(t is dy or t.op in backward for t in op.inputs) or any(
                c in backward for c in op.control_inputs):
            backward.add(op)
    order = [op for op in ops if op not in backward] + [op for op in ops if op in backward]
    position = {op: i for i, op in enumerate(order)}
    forward_end = len(order) - len(backward)
    roots = {}
    outputs = {_root(t, roots).ref() for t in graph.outputs}
    born, last, size = {}, {}, {}
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
    output_key = _root(y, roots).ref()
    saved, input_saved, output_saved = 0, False, False
    keys = [k for k in born if k not in outputs]
    for key in keys:
        if born[key] < forward_end <= last[key]:
            if key == output_key:
                output_saved = True
            else:
                saved += size[key]
    input_saved = last.get(_root(x, roots).ref(), -1) >= forward_end
    temporaries = _temporary_peak(
        [(born[k], last[k], size[k]) for k in keys
         if not (born[k] < forward_end <= last[k]) and k != output_key]
        + [(forward_end, last.get(dy.ref(), forward_end), _nbytes(dy))], len(order))
    return SegmentMemory(saved, temporaries, input_saved, output_saved)


def _temporary_peak(intervals, length):
    """The largest sum of sizes over intervals `(first, last, size)` covering one position."""
    change = [0] * (length + 2)
    for first, final, nbytes in intervals:
        change[first] += nbytes
        change[final + 1] -= nbytes
    peak = alive = 0
    for delta in change:
        alive += delta
        peak = max(peak, alive)
    return peak
