"""Collective keys: a range of its own for each MirroredStrategy, and keys reused per call.

Works around tensorflow/tensorflow#61314: a second mirrored strategy over another number of
devices fails at its first all-reduce; and the record TensorFlow keeps of each instance key.

Design: docs/design.md#collective-keys
"""

import contextlib
import functools
import itertools
import logging

from mgpu_tf.compat import private_collectives, private_runtime

__all__ = ["distinct_collective_keys", "keeping_keys", "reused_instance_keys"]

logger = logging.getLogger("mgpu_tf")

_KEY_BLOCKS = itertools.count(1)
_KEY_BLOCK_SIZE = 1_000_000
_reported = set()


@contextlib.contextmanager
def distinct_collective_keys():
    """Makes the MirroredStrategy built inside the block use its own collective keys.

    Where `MirroredStrategy.__init__` starts its keys
    (`mgpu_tf.compat.private_runtime.collective_key_base`) moves to a fresh block for the
    construction and back after; on a TensorFlow without it, the block logs once and
    changes nothing.
    """
    import tensorflow as tf

    cls = tf.distribute.MirroredStrategy
    try:
        base = private_runtime.collective_key_base(cls)
    except private_runtime.PrivateNameError as error:
        if "distinct" not in _reported:
            _reported.add("distinct")
            logger.info("mgpu_tf: keeping TensorFlow's collective keys: %s", error)
        yield
        return
    private_runtime.set_collective_key_base(cls, base + _KEY_BLOCK_SIZE * next(_KEY_BLOCKS))
    try:
        yield
    finally:
        private_runtime.set_collective_key_base(cls, base)


@contextlib.contextmanager
def reused_instance_keys(strategy):
    """Functions traced inside the block take their collectives' instance keys once.

    TensorFlow keeps about 1 KB per key for the life of the process (design.md#collective-keys).
    Both workers must trace at the same point. Without the private names, logs once.
    """
    try:
        launcher = private_collectives.collective_launchers(strategy)[0]
        unique = private_collectives.unique_instance_keys(launcher)
    except private_runtime.PrivateNameError as error:
        if "reused" not in _reported:
            _reported.add("reused")
            logger.info("mgpu_tf: a new collective instance key per call: %s", error)
        yield
        return
    private_collectives.set_unique_instance_keys(launcher, False)
    try:
        yield
    finally:
        private_collectives.set_unique_instance_keys(launcher, unique)


def keeping_keys(function, strategy):
    """`function` (a `tf.function`), called in `reused_instance_keys(strategy)`."""
    @functools.wraps(function)
    def call(*args, **kwargs):
        with reused_instance_keys(strategy):
            return function(*args, **kwargs)

    return call
