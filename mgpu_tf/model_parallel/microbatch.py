"""Splitting a batch into micro-batches, and joining their outputs back.

Design: docs/design.md#the-pipeline-schedule
"""

import numbers

import keras
import tensorflow as tf

from mgpu_tf.compat import private

__all__ = ["check_microbatches", "split", "join", "batch_coupled_layers"]

# Layers whose output for one example depends on the other examples of the batch.
_BATCH_COUPLED = (keras.layers.BatchNormalization,)


def check_microbatches(value):
    """Returns `value` as an int, or raises for anything but an integer of at least 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"`microbatches` must be an integer. Received: microbatches={value!r}"
        )
    if value < 1:
        raise ValueError(
            "`microbatches` must be at least 1 (1 means no pipelining). "
            f"Received: microbatches={value!r}"
        )
    return int(value)


def split(x, microbatches):
    """Splits `x` along its first axis into `microbatches` pieces, by `torch.chunk`'s rule.

    All but the last ones have `ceil(batch / microbatches)` rows: 10 rows in 4 give 3, 3, 3, 1.
    """
    if microbatches == 1:
        return [x]
    static = x.shape[0]
    if static is not None:
        size = -(-static // microbatches)
        sizes = [max(0, min(size, static - m * size)) for m in range(microbatches)]
        return tf.split(x, sizes, axis=0)
    batch = tf.shape(x)[0]
    size = (batch + microbatches - 1) // microbatches
    starts = tf.range(microbatches) * size
    sizes = tf.clip_by_value(batch - starts, 0, size)
    return tf.split(x, sizes, axis=0, num=microbatches)


def join(pieces):
    """Concatenates micro-batch outputs back into one batch."""
    return pieces[0] if len(pieces) == 1 else tf.concat(pieces, axis=0)


def batch_coupled_layers(model):
    """Names the layers (nested ones included) that couple the examples of a batch."""
    return [layer.name for layer in private.nested_layers(model)
            if isinstance(layer, _BATCH_COUPLED)]
