"""The GPipe schedule: micro-batches through placed stages, forward then backward.

Under `tf.GradientTape`, TensorFlow 2 does not put a gradient op on the device of
its forward op (tensorflow/tensorflow#33688): in a traced train step every gradient
of a `tf.device`-scoped stage gets no device and lands on the default one. So the
whole pipeline is one `tf.custom_gradient`: its forward runs each (stage,
micro-batch) under the stage's device with a tape of its own, and its gradient
runs each of those tapes' backward pass, and sums each variable's gradients over
the micro-batches, under the same device.

Each device works on one micro-batch at a time, as a GPU stream would: the
forward of micro-batch `m + 1` on stage `k` waits for that of `m`, and stage `k`
starts its backward passes when its last forward is done (fill, then drain). The
stages themselves overlap, since only data links them.
"""

import tensorflow as tf

from mgpu_tf.model_parallel import microbatch

__all__ = ["run_pipeline"]


def run_pipeline(stages, devices, x, microbatches, training):
    """Runs `x` through `stages`, stage `k` on `devices[k]`, in micro-batches.

    Args:
        stages: callables (Keras models), one per stage.
        devices: one device name per stage.
        x: the batch.
        microbatches: how many micro-batches to split it into.
        training: passed to each stage; with `True` the gradient is placed too.

    Returns:
        The output of the last stage for the whole batch.
    """
    if not training:
        return _forward(stages, devices, x, microbatches, training, tapes=None)

    @tf.custom_gradient
    def pipelined(x):
        tapes = {}
        y = _forward(stages, devices, x, microbatches, training, tapes)

        def backward(dy, variables=None):
            return _backward(devices, dy, microbatches, tapes, list(variables or []))

        return y, backward

    with tf.device(devices[-1]):
        return pipelined(x)


def _forward(stages, devices, x, microbatches, training, tapes):
    with tf.device(devices[0]):
        pieces = microbatch.split(x, microbatches)
    last_forward = [None] * len(stages)
    outputs = []
    for m, h in enumerate(pieces):
        for k, (stage, device) in enumerate(zip(stages, devices)):
            after = [last_forward[k]] if last_forward[k] is not None else []
            with tf.device(device), tf.control_dependencies(after):
                if tapes is None:
                    out = stage(h, training=training)
                else:
                    with tf.GradientTape() as tape:
                        if h.dtype.is_floating:
                            tape.watch(h)
                        out = stage(h, training=training)
                    tapes[k, m] = (tape, h, out)
            last_forward[k] = out
            h = out
        outputs.append(h)
    with tf.device(devices[-1]):
        return microbatch.join(outputs)


def _add(grads):
    if len(grads) == 1:
        return grads[0]
    if any(isinstance(g, tf.IndexedSlices) for g in grads):
        slices = [g if isinstance(g, tf.IndexedSlices) else tf.IndexedSlices(
            g, tf.range(tf.shape(g)[0])) for g in grads]
        return tf.IndexedSlices(tf.concat([s.values for s in slices], 0),
                                tf.concat([s.indices for s in slices], 0),
                                slices[0].dense_shape)
    return tf.add_n(grads)


def _backward(devices, dy, microbatches, tapes, variables):
    stages = len(devices)
    with tf.device(devices[-1]):
        dys = microbatch.split(dy, microbatches)
    collected = [[] for _ in variables]  # per variable: (stage, gradient) pairs
    upstream = {}  # micro-batch -> gradient flowing into the stage being done
    for m in range(microbatches):
        upstream[m] = dys[m]
    for k in reversed(range(stages)):
        # Fill, then drain: stage k's backward starts after its last forward.
        previous = [tapes[k, microbatches - 1][2]]
        with tf.device(devices[k]):
            for m in reversed(range(microbatches)):
                tape, h, out = tapes[k, m]
                sources = ([h] if h.dtype.is_floating else []) + variables
                with tf.control_dependencies(previous):
                    grads = tape.gradient(out, sources, output_gradients=upstream[m])
                if h.dtype.is_floating:
                    upstream[m], grads = grads[0], grads[1:]
                else:
                    upstream[m] = None
                for i, grad in enumerate(grads):
                    if grad is not None:
                        collected[i].append((k, grad))
                previous = [g for g in [upstream[m]] + grads
                            if g is not None and not isinstance(g, tf.IndexedSlices)]
                previous = previous or [out]
    variable_grads = []
    for pairs in collected:
        if not pairs:
            variable_grads.append(None)
            continue
        with tf.device(devices[pairs[0][0]]):
            variable_grads.append(_add([g for _, g in pairs]))
    with tf.device(devices[0]):
        dx = microbatch.join([upstream[m] for m in range(microbatches)]) \
            if upstream[0] is not None else None
    return dx, variable_grads
