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
class _Record:
    """What the backward pass of a (stage, micro-batch) needs: its tape, inputs and outputs."""

    tape: object
    entering: list
    outputs: list


@dataclasses.dataclass(frozen=True)
class _Replay:
    """What a recomputed (stage, micro-batch) keeps: its inputs and its state before."""

    stage: object
    entering: list
    state: list
    before: list
    outputs: list


def run_pipeline(cut, runners, devices, inputs, microbatches, training, recompute="never",
                 paused=contextlib.nullcontext):
    """Runs the flat `inputs` through the stages of `cut`, stage `k` on `devices[k]`.

    `runners[k]` runs stage `k` (the stage itself, or its XLA-compiled form) on a list of
    entering values. `training` goes to each layer; with `True` the gradient is placed too.
    `recompute`, a `Recompute`, says which micro-batches are recomputed in the backward
    pass; `paused` is entered around every recomputed forward. Returns the model's flat
    outputs for the whole batch.
    """
    if not training:
        return _forward(cut, runners, devices, inputs, microbatches, training, tapes=None)
    states = [recompute_lib.stage_state(stage) for stage in cut.stages]

    @tf.custom_gradient
    def pipelined(*flat):
        tapes = {}
        outputs = _forward(cut, runners, devices, list(flat), microbatches, training, tapes,
                           recompute, states)

        def backward(*upstream, variables=None):
            return _backward(cut, runners, devices, list(upstream), flat, microbatches, tapes,
                             list(variables or []), training, paused)

        return outputs, backward

    with tf.device(devices[-1]):
        return list(pipelined(*inputs))


def _floating(value):
    return value.dtype.is_floating


def _arrive(values, ops):
    """`values` copied to the current device (once each), once `ops` have run."""
    with tf.control_dependencies(ops) if ops else contextlib.nullcontext():
        return [tf.identity(value) for value in values]


def _forward(cut, runners, devices, inputs, microbatches, training, tapes, recompute="never",
             states=None):
    pieces = []
    for value, stage in zip(inputs, cut.input_stage):
        with tf.device(devices[stage]):
            pieces.append(microbatch.split(value, microbatches))
    last_forward = [[] for _ in cut.stages]
    outputs = []
    for m in range(microbatches):
        values = {key: piece[m] for key, piece in zip(cut.inputs, pieces)}
        replay = tapes is not None and recompute_lib.is_recomputed(recompute, m, microbatches)
        for k, (stage, device) in enumerate(zip(cut.stages, devices)):
            with tf.device(device):
                entering = _arrive([values[key] for key in stage.entering], last_forward[k])
                if replay:
                    before = recompute_lib.read(states[k])
                    out = runners[k](entering, training)
                    tapes[k, m] = _Replay(stage, entering, states[k], before, out)
                elif tapes is not None:
                    with tf.GradientTape() as tape:
                        tape.watch([x for x in entering if _floating(x)])
                        out = runners[k](entering, training)
                    tapes[k, m] = _Record(tape, entering, out)
                else:
                    out = runners[k](entering, training)
            last_forward[k] = list(out)
            values.update(zip(stage.leaving, out))
        outputs.append([values[key] for key in cut.outputs])
    joined = []
    for j, stage in enumerate(cut.output_stage):
        with tf.device(devices[stage]):
            joined.append(microbatch.join([out[j] for out in outputs]))
    return joined


def _after(values, ops):
    """`values`, available only once `ops` have run."""
    if not ops:
        return values
    with tf.control_dependencies(ops):
        return [tf.identity(value) for value in values]


def _sum(parts):
    """The sum of gradients for one tensor or variable; dense when any part is dense."""
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(g, tf.IndexedSlices) for g in parts):
        return tf.IndexedSlices(tf.concat([s.values for s in parts], 0),
                                tf.concat([s.indices for s in parts], 0), parts[0].dense_shape)
    # As TensorFlow's tape adds a variable's gradients from two uses on one device.
    return tf.add_n([tf.convert_to_tensor(g) for g in parts])


def _dense(grads):
    return [g for g in grads if g is not None and not isinstance(g, tf.IndexedSlices)]


def _replayed(replay, previous, runner, training, paused):
    """Recomputes a stage's micro-batch once `previous` ran; returns its record."""
    # The inputs' data path starts the recomputation only after the stage's backward
    # work so far, so that what it recomputes is alive only while it is needed.
    entering = _after(replay.entering, previous)
    with paused(), recompute_lib.replayed_state(replay.state, replay.before):
        with tf.GradientTape() as tape:
            tape.watch([x for x in entering if _floating(x)])
            out = runner(entering, training)
    return _Record(tape, entering, out)


def _collect(pairs, grad):
    """Adds a micro-batch's gradient to a variable's list; dense ones are summed as they
    come, so that each is freed once added."""
    if pairs and not isinstance(grad, tf.IndexedSlices) and not isinstance(
            pairs[-1], tf.IndexedSlices):
        pairs[-1] = tf.add_n([pairs[-1], grad])
    else:
        pairs.append(grad)
    return pairs[-1]


def _backward(cut, runners, devices, upstream, inputs, microbatches, tapes, variables,
              training=True, paused=contextlib.nullcontext):
    arriving = [{} for _ in range(microbatches)]  # per micro-batch: key -> gradient parts
    for key, dy, stage in zip(cut.outputs, upstream, cut.output_stage):
        if dy is None:
            continue
        with tf.device(devices[stage]):
            for m, piece in enumerate(microbatch.split(dy, microbatches)):
                arriving[m].setdefault(key, []).append(piece)
    collected = [[] for _ in variables]  # per variable: its gradients, dense ones summed
    for k in reversed(range(len(cut.stages))):
        stage = cut.stages[k]
        previous = list(tapes[k, microbatches - 1].outputs)
        with tf.device(devices[k]):
            for m in reversed(range(microbatches)):
                record = tapes[k, m]
                if isinstance(record, _Replay):
                    record = _replayed(record, previous, runners[k], training, paused)
                targets, incoming = [], []
                for out, key in zip(record.outputs, stage.leaving):
                    parts = arriving[m].pop(key, None)
                    if parts and _floating(out):
                        targets.append(out)
                        incoming.append(_sum(parts))  # on this device: each part sent once
                if not targets:
                    continue
                sources = [x for x in record.entering if _floating(x)]
                keys = [key for key, x in zip(stage.entering, record.entering) if _floating(x)]
                # No control edge orders this backward after the previous one: Grappler's
                # arithmetic optimizer turns such edges into a cycle, and the whole step then
                # runs half-optimised (docs/design.md#the-pipeline-schedule).
                grads = record.tape.gradient(targets, sources + variables,
                                             output_gradients=incoming)
                dxs, dvars = grads[:len(sources)], grads[len(sources):]
                for key, dx in zip(keys, dxs):
                    if dx is not None:
                        arriving[m].setdefault(key, []).append(dx)
                sums = [_collect(collected[i], g) for i, g in enumerate(dvars) if g is not None]
                previous = _dense(list(dxs) + sums) or previous
    variable_grads = []
    for variable, parts in zip(variables, collected):
        if not parts:
            variable_grads.append(None)
            continue
        with tf.device(_device(variable)):
            variable_grads.append(_sum(parts))
    input_grads = []
    for key, value, stage in zip(cut.inputs, inputs, cut.input_stage):
        parts = [arriving[m].get(key) for m in range(microbatches)]
        if not _floating(value) or any(p is None for p in parts):
            input_grads.append(None)
            continue
        with tf.device(devices[stage]):
            input_grads.append(microbatch.join([_sum(p) for p in parts]))
    return input_grads, variable_grads


def _device(variable):
    return getattr(variable, "device", None) or ""
