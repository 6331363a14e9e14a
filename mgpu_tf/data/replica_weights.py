"""Sample weights that make unequal replica batches give the single-device update.

Replica `i` with `b_i` of a step's `B` examples weighs them by `R * b_i / B`, which restores the
global mean that Keras' per-replica averaging loses. The `loss` Keras shows for such a step is
not the update's loss.

Design: docs/design.md#loss-correction-weights
"""

import tensorflow as tf

__all__ = ["can_weigh", "correction_weights", "attach_weights"]


def can_weigh(element_spec):
    """True when examples are `(x, y)` or `(x, y, sample_weight)` tuples."""
    return isinstance(element_spec, tuple) and len(element_spec) in (2, 3)


def correction_weights(batch, step_total, num_replicas):
    """Returns the weight `R * b / B` for every example of a replica's batch, as float32.

    `step_total` is the examples in the whole step (a scalar tensor); `num_replicas` is
    `num_replicas_in_sync`. `correction_weights((x, y), 12, 2)` with 8 rows in `x` gives 4/3 each.
    """
    size = tf.shape(tf.nest.flatten(batch)[0], out_type=tf.int64)[0]
    weight = tf.cast(num_replicas * size, tf.float64) / tf.cast(
        tf.maximum(step_total, 1), tf.float64)
    return tf.fill([size], tf.cast(weight, tf.float32))


def attach_weights(batch, weights):
    """Returns `(x, y, sample_weight * weights)` for an `(x, y[, sample_weight])` batch."""
    if len(batch) == 2:
        x, y = batch
        return x, y, weights
    x, y, sample_weight = batch
    shape = tf.concat([tf.shape(weights), tf.ones([tf.rank(sample_weight) - 1], tf.int32)], 0)
    return x, y, sample_weight * tf.cast(tf.reshape(weights, shape), sample_weight.dtype)
