"""Memory per pipeline stage of a `ModelParallel`: what each of its devices holds in a step.

Each stage (of the flattened graph, several tensors entering and leaving) is traced forward
and backward on one micro-batch; what its backward pass reads is kept for every micro-batch.

Design: docs/design.md#memory-estimates
"""

import tensorflow as tf

from mgpu_tf.model_parallel import graph as graph_lib
from mgpu_tf.model_parallel import microbatch
from mgpu_tf.model_parallel import recompute as recompute_lib
from mgpu_tf.model_parallel import stage as stage_lib
from mgpu_tf.planner.memory import Footprint

__all__ = ["stage_footprints"]

# Ops whose outputs are a view of their first input, or no buffer of their own.
_VIEWS = {"Identity", "IdentityN", "Reshape", "Squeeze", "ExpandDims", "StopGradient",
          "EnsureShape", "Snapshot"}
_EXTERNAL = {"Placeholder", "Const", "ReadVariableOp", "VarHandleOp", "_Arg", "NoOp",
             "VariableShape", "ResourceGather"}
_METADATA = {"Shape", "ShapeN", "Rank", "Size", "BroadcastGradientArgs"}


def stage_footprints(model, inputs, *, slots=2):
    """Returns one `Footprint` per stage of `model` (a `ModelParallel`) for the batch `inputs`.

    `inputs` is one batch as the model takes it; `slots` the optimizer's slot variables per
    weight (Adam: 2). A variable counts on the stage that holds it (a tied embedding on its
    first stage). What enters a stage is kept for every micro-batch, what its backward reads
for each micro-batch, or for one with `recompute`.

    Example:

    ```python
    model = mgpu_tf.ModelParallel(lm, ["CPU:0", "CPU:1"], microbatches=4)
    for footprint in stage_footprints(model, batch, slots=2):
        print(footprint)
    ```
    """
    cut, microbatches = model.stages, model.microbatches
    flat = stage_lib.bind_inputs(model.graph, inputs)
    values = {key: microbatch.split(x, microbatches)[0] for key, x in zip(cut.inputs, flat)}
    replay = microbatches > 1 and model.recompute != recompute_lib.Recompute.NEVER
    placed, out = set(), []
    for stage in cut.stages:
        entering = [values[key] for key in stage.entering]
        saved, temporaries, leaving = _stage_memory(stage, entering)
        values.update(zip(stage.leaving, leaving))
        own = [v for v in stage.variables if id(v) not in placed]
        placed.update(id(v) for v in own)
        trainable = [v for v in own if v.trainable]
        entering_bytes = sum(_nbytes(x) for x in entering if x.dtype.is_floating)
        kept = 1 if replay else microbatches
        # The values entering the stage are held for every micro-batch until its backward.
        activations = saved * kept + entering_bytes * microbatches
        largest = max([graph_lib.param_bytes([v]) for v in trainable] + [0])
        trainable_bytes = graph_lib.param_bytes(trainable)
        out.append(Footprint(graph_lib.param_bytes(own), trainable_bytes,
                             slots * trainable_bytes, int(activations),
                             (slots + 1) * largest, int(temporaries)))
    return out


def _nbytes(tensor):
    shape = tensor.shape
    if tensor.dtype in (tf.resource, tf.variant) or not shape.is_fully_defined():
        return 0
    return shape.num_elements() * tensor.dtype.size


def _stage_memory(stage, entering):
    """(bytes its backward reads, peak of its other tensors, its outputs) for one micro-batch."""
    specs = [tf.TensorSpec(x.shape, x.dtype) for x in entering]
    trainable = [v for v in stage.variables if v.trainable]
    traced = {}

    def step(*xs):
        with tf.GradientTape() as tape:
            floating = [x for x in xs if x.dtype.is_floating]
            tape.watch(floating)
            ys = stage(list(xs), training=True)
        targets = [y for y in ys if y.dtype.is_floating]
        dys = [tf.ones_like(y) for y in targets]
        traced.update(dys=dys)
        grads = tape.gradient(targets, floating + trainable, output_gradients=dys)
        return [g for g in grads if g is not None and not isinstance(g, tf.IndexedSlices)]

    function = tf.function(step)
    graph = function.get_concrete_function(*specs).graph
    saved, temporaries = _liveness(graph, traced["dys"])
    return saved, temporaries, stage(list(entering), training=False)


def _root(tensor, roots):
    while tensor.op.type in _VIEWS and tensor.op.inputs:
        index = tensor.value_index if tensor.op.type == "IdentityN" else 0
        tensor = tensor.op.inputs[index]
    return roots.setdefault(tensor.ref(), tensor)


def _liveness(graph, dys):
    """Bytes made in the forward pass and read in the backward one; the peak of the rest."""
    starts = {dy.op for dy in dys}
    ops = graph.get_operations()
    backward = set()
    for op in ops:  # creation order is topological
        if op in starts or any(t.op in backward for t in op.inputs) or any(
                c in backward for c in op.control_inputs):
            backward.add(op)
    order = [op for op in ops if op not in backward] + [op for op in ops if op in backward]
    position = {op: i for i, op in enumerate(order)}
    forward_end = len(order) - len(backward)
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
    saved, change = 0, [0] * (len(order) + 2)
    for key, first in born.items():
        if first < forward_end <= last[key]:
            saved += size[key]
        else:
            change[first] += size[key]
            change[last[key] + 1] -= size[key]
    peak = alive = 0
    for delta in change:
        alive += delta
        peak = max(peak, alive)
    return saved, peak
