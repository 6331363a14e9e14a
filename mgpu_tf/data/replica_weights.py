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

What Keras shows is not the update's loss in steps whose replica batches are
unequal (full steps with equal batches get weight 1 and show the true mean). Its
loss tracker weighs each replica's loss, already scaled by `R * b_i / B`, by the
replica's batch size `b_i`, so the `loss` shown for such a step is
`sum_i (R * b_i / B) * (b_i / B) * m_i`, `m_i` being replica `i`'s mean loss:
with equal per-example losses, `R * sum_i b_i**2 / B**2` times the true mean. With
`weights=[2, 1]` on two replicas that is 10/9 of it (11% high); the update is
still exact. Compiled metrics (accuracy, ...) get the weights as sample weights,
so each shows the mean of its replicas' means weighted by `b_i**2` instead of
`b_i`. This holds for `evaluate` too, so a data set only evaluated is made with
`shard_dataset(..., training=False)`: it carries no correction weights, and Keras'
weighing by `b_i` then gives the true means, even in a short last step. Keras'
tracker would need to weigh each replica's loss equally to show the true mean in
training (mgpu_tf leaves Keras' train step as it is).
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
