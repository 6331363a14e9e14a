"""Random draws of each replica's own: Keras' seeds folded with the replica's id.

Keras' random layers (Dropout, GaussianNoise, augmentation) draw from a seed generator
every replica reads alike, so row i of every replica's batch got the same Dropout mask.
The replica's id is folded into each seed where Keras' TensorFlow backend turns a seed
into an op's; one replica's draws, and every draw outside a strategy, are unchanged.

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
    """Makes each replica of a strategy draw its own random numbers in Keras' layers;
    `make_strategy` calls it for mirrored and multi_worker, and again changes nothing.
    Returns True when the fix is in place; raises `PrivateNameError` when Keras lacks the
    function it wraps."""
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
