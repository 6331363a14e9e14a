"""Random draws of each replica's own: Keras' seeds folded with the replica's id.

Keras' random layers (Dropout, GaussianNoise, random augmentation) draw from a seed
generator whose state every replica of a strategy reads alike, so the replicas draw the
same numbers: row i of every replica's batch gets the same Dropout mask, where one device
draws one mask for the whole batch. Folding the replica's id into each seed, in the one
function through which Keras' TensorFlow backend turns a seed into an op's, gives each
replica its own draws; one replica's, and every draw outside a strategy, are unchanged.

Design: docs/concepts.md#what-a-combination-gives
"""

import functools

from mgpu_tf.compat import private

__all__ = ["apply_replica_seed_fix", "installed"]

_MARK = "_mgpu_tf_replica_seeds"


def installed():
    """True when Keras' TensorFlow backend folds the replica's id into its seeds."""
    try:
        return getattr(private.random_seed_cast(), _MARK, False)
    except private.PrivateNameError:
        return False


def apply_replica_seed_fix():
    """Makes each replica of a strategy draw its own random numbers in Keras' layers.

    `make_strategy("mirrored")` and `make_strategy("multi_worker")` call it; calling it again
    changes nothing.

    Example:

    ```python
    from mgpu_tf.compat import replica_seeds
    replica_seeds.apply_replica_seed_fix()  # what make_strategy("mirrored") does
    ```

    Returns:
        True when the fix is in place.

    Raises:
        mgpu_tf.compat.private.PrivateNameError: when this Keras lacks the function.
    """
    original = private.random_seed_cast()
    if getattr(original, _MARK, False):
        return True

    @functools.wraps(original)
    def cast_seed(seed):
        import tensorflow as tf

        seed = original(seed)
        context = tf.distribute.get_replica_context()
        if context is None or context.num_replicas_in_sync == 1:
            return seed
        replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
        return tf.cast(tf.random.experimental.stateless_fold_in(seed, replica), seed.dtype)

    setattr(cast_seed, _MARK, True)
    private.set_random_seed_cast(cast_seed)
    return True
