"""BatchNormalization's moving statistics, kept the same on every replica and worker.

Keras 3 makes them with `aggregation="none"` (tf_keras read them as their mean over the
replicas): under a `tf.distribute` strategy each replica moves its own copy with its own
batches, so the copies drift apart, and a worker saves its first replica's copy instead of
what `evaluate` measured. The train step averages them over all replicas after each step.

Design: docs/design.md#batch-normalisation-statistics
"""

import math

import keras

from mgpu_tf.compat import private

__all__ = ["averaged_after_step", "moving_statistics"]

# The variables a BatchNormalization layer moves in training (the last three with renorm=True).
_MOVING = ("moving_mean", "moving_variance", "moving_stddev", "renorm_mean", "renorm_stddev")


def moving_statistics(model):
    """The moving statistics of `model`'s BatchNormalization layers that each replica moves alone.

    Those of trainable layers that normalise with each replica's own batch
    (`synchronized=False`): a synchronized layer moves every copy with the global batch.
    """
    out = []
    for layer in private.nested_layers(model):
        if (isinstance(layer, keras.layers.BatchNormalization) and layer.trainable
                and not layer.synchronized):
            out += [v for v in (getattr(layer, name, None) for name in _MOVING) if v is not None]
    return out


def averaged_after_step(model, step_function):
    """`step_function` (one replica's train step), followed by the mean over all replicas of
    the moving statistics it moved, in one all-reduce.

    The moving statistics are linear in the batches' statistics, so their mean after each
    step is what one copy moved by the replicas' mean statistics would hold.
    """

    def step(data):
        logs = step_function(data)
        _average(moving_statistics(model))  # found as traced: the forward pass built them
        return logs

    return step


def _average(variables):
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if not variables or context is None or context.num_replicas_in_sync == 1:
        return
    packed = tf.concat([tf.reshape(tf.cast(v.value, tf.float32), [-1]) for v in variables], 0)
    # Copied to the replica's device: a collective reduces values of one device.
    mean = context.all_reduce("MEAN", tf.identity(packed))
    pieces = tf.split(mean, [math.prod(v.shape) for v in variables])
    for variable, piece in zip(variables, pieces):
        variable.assign(tf.cast(tf.reshape(piece, variable.shape), variable.dtype))
