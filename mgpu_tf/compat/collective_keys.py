"""A collective key range of its own for each MirroredStrategy.

Works around tensorflow/tensorflow#61314: a second mirrored strategy over another number of
devices fails at its first all-reduce.

Design: docs/design.md#collective-keys
"""

import contextlib
import itertools
import logging

from mgpu_tf.compat import private_runtime

__all__ = ["distinct_collective_keys"]

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
        if not _reported:
            _reported.add(True)
            logger.info("mgpu_tf: keeping TensorFlow's collective keys: %s", error)
        yield
        return
    private_runtime.set_collective_key_base(cls, base + _KEY_BLOCK_SIZE * next(_KEY_BLOCKS))
    try:
        yield
    finally:
        private_runtime.set_collective_key_base(cls, base)
