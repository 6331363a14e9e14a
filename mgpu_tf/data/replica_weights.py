"""Sample weights that make unequal replica batches give the single-device update.

Keras 3's TensorFlow trainer averages each replica's loss over its own batch
(`"sum_over_batch_size"`), multiplies it by `1 / num_replicas_in_sync`
(`keras.src.losses.loss.scale_loss_for_distribution`) and sums the replicas'
gradients. That equals the mean over the global batch only when every replica
has the same number of examples. When replica `i` has `b_i` of the `B` examples
of a step (weighted shards, or the short last step of an epoch), weighting its
examples by `R * b_i / B` restores the exact global mean:
`sum_i (1/R) (1/b_i) sum_j (R b_i / B) l_ij = (1/B) sum_ij l_ij`.
An empty batch has loss 0 (Keras divides with `divide_no_nan`), so it adds nothing.
Nothing in `tf.distribute` does this: its mean of replicas assumes equal batches.

The weights also reach compiled metrics and the reported loss, which Keras
averages per replica: in steps whose replica batches are unequal, those figures
are weighted by `R * b_i / B` too. Full steps with equal batches get weight 1.
The correction assumes the default loss reduction, `"sum_over_batch_size"`; a loss
reduced with `"sum"` or `"mean_with_sample_weight"` is scaled differently.
"""

import tensorflow as tf

__all__ = ["can_weigh", "correction_weights", "attach_weights"]


def can_weigh(element_spec):
    """True when examples are `(x, y)` or `(x, y, sample_weight)` tuples."""
    return isinstance(element_spec, tuple) and len(element_spec) in (2, 3)


def correction_weights(batch, step_total, num_replicas):
    """Returns the weight `R * b / B` for every example of a replica's batch.

    Example:

    ```python
    correction_weights((x, y), step_total=12, num_replicas=2)  # x has 8 rows: 4/3 each
    ```

    Args:
        batch: the replica's batch (any structure; its first tensor gives the size).
        step_total: examples in the whole step, over all replicas (a scalar tensor).
        num_replicas: `num_replicas_in_sync`.

    Returns:
        A float32 vector with one weight per example.
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
