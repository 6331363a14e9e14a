"""The GPipe schedule: micro-batches through placed stages, forward then backward.

Design: docs/design.md#the-pipeline-schedule
"""

import contextlib
import dataclasses

import tensorflow as tf

from mgpu_tf.model_parallel import microbatch
from mgpu_tf.model_parallel import recompute as recompute_lib

__all__ = ["run_pipeline"]


@dataclasses.dataclass(frozen=True)
class _Replay:
    """What a recomputed (stage, micro-batch) keeps: its input and its state before."""

    atoms: list
    input: object
    state: list
    before: list
    output: object = None


def run_pipeline(stages, devices, x, microbatches, training, recompute="never",
                 paused=contextlib.nullcontext):
    """Runs `x` through `stages` (their atoms' models), stage `k` on `devices[k]`, in micro-batches.

    `training` goes to each atom; with `True` the gradient is placed too. `recompute`, a
    `Recompute` as `ModelParallel` parsed it, says which micro-batches are recomputed in the
    backward pass; `paused` is entered around every recomputed forward. Returns the last stage's output for the whole batch.
    """
    if not training:
        return _forward(stages, devices, x, microbatches, training, tapes=None)
    states = [recompute_lib.stage_state(atoms) for atoms in stages]

    @tf.custom_gradient
    def pipelined(x):
        tapes = {}
        y = _forward(stages, devices, x, microbatches, training, tapes, recompute, states)

        def backward(dy, variables=None):
            return _backward(devices, dy, microbatches, tapes, list(variables or []),
                             training, paused)

        return y, backward

    with tf.device(devices[-1]):
        return pipelined(x)


def _run_atoms(atoms, h, training, records=None):
    """Runs a stage's atoms on `h`; with `records`, under a tape per atom kept there."""
    for atom in atoms:
        if records is None:
            out = atom(h, training=training)
        else:
            with tf.GradientTape(persistent=True) as tape:
                if h.dtype.is_floating:
                    tape.watch(h)
                out = atom(h, training=training)
            records.append((tape, h, out))
        h = out
    return h


def _forward(stages, devices, x, microbatches, training, tapes, recompute="never",
             states=None):
    with tf.device(devices[0]):
        pieces = microbatch.split(x, microbatches)
    last_forward = [None] * len(stages)
    outputs = []
    for m, h in enumerate(pieces):
        replay = tapes is not None and recompute_lib.is_recomputed(recompute, m, microbatches)
        for k, (atoms, device) in enumerate(zip(stages, devices)):
            with tf.device(device):
                h = _after(h, [last_forward[k]] if last_forward[k] is not None else [])
                if replay:
                    before = recompute_lib.read(states[k])
                    out = _run_atoms(atoms, h, training)
                    tapes[k, m] = _Replay(atoms, h, states[k], before, out)
                    h = out
                elif tapes is not None:
                    tapes[k, m] = []
                    h = _run_atoms(atoms, h, training, tapes[k, m])
                else:
                    h = _run_atoms(atoms, h, training)
            last_forward[k] = h
        outputs.append(h)
    with tf.device(devices[-1]):
        return microbatch.join(outputs)


def _after(value, ops):
    """`value`, available only once `ops` have run."""
    if not ops:
        return value
    with tf.control_dependencies(ops):
        return tf.nest.map_structure(tf.identity, value)


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


def _dense(grads):
    return [g for g in grads if g is not None and not isinstance(g, tf.IndexedSlices)]


def _replayed(replay, previous, training, paused):
    """Recomputes a stage's micro-batch once `previous` ran; returns its tape records."""
    records = []
    # The input's data path starts the recomputation only after the stage's backward
    # work so far, so that what it recomputes is alive only while it is needed.
    h = _after(replay.input, previous)
    with paused(), recompute_lib.replayed_state(replay.state, replay.before):
        _run_atoms(replay.atoms, h, training, records)
    return records


def _collect(pairs, stage, grad):
    """Adds a micro-batch's gradient to a variable's `(stage, gradient)` pairs.

    Dense ones are summed as they come, so that each is freed once added.
    """
    if pairs and not isinstance(grad, tf.IndexedSlices) and not isinstance(
            pairs[-1][1], tf.IndexedSlices):
        pairs[-1] = (stage, tf.add_n([pairs[-1][1], grad]))
    else:
        pairs.append((stage, grad))
    return pairs[-1][1]


def _backward(devices, dy, microbatches, tapes, variables, training=True,
              paused=contextlib.nullcontext):
    with tf.device(devices[-1]):
        upstream = microbatch.split(dy, microbatches)  # per micro-batch: gradient coming in
    collected = [[] for _ in variables]  # per variable: (stage, gradient) pairs
    for k in reversed(range(len(devices))):
        last = tapes[k, microbatches - 1]
        previous = [last[-1][2] if isinstance(last, list) else last.output]
        with tf.device(devices[k]):
            for m in reversed(range(microbatches)):
                records = tapes[k, m]
                if isinstance(records, _Replay):
                    records = _replayed(records, previous, training, paused)
                for tape, h, out in reversed(records):
                    incoming, dx = upstream[m], None
                    if h.dtype.is_floating:
                        dx = tape.gradient(out, h, output_gradients=_after(incoming, previous))
                        previous = _dense([dx]) or previous
                    grads = tape.gradient(out, variables,
                                          output_gradients=_after(incoming, previous))
                    sums = [_collect(collected[i], k, grad)
                            for i, grad in enumerate(grads) if grad is not None]
                    previous = _dense(sums) or previous
                    upstream[m] = dx
    variable_grads = []
    for pairs in collected:
        if not pairs:
            variable_grads.append(None)
            continue
        with tf.device(devices[pairs[0][0]]):
            variable_grads.append(_add([g for _, g in pairs]))
    dx = None
    if all(g is not None for g in upstream):
        with tf.device(devices[0]):
            dx = microbatch.join(upstream)
    return dx, variable_grads
