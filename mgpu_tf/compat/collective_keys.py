"""A collective key range of its own for each MirroredStrategy.

TensorFlow's `MirroredStrategy` starts the collective keys of every instance at
the same number, and the runtime remembers each key's group size for the life of
the process: a second mirrored strategy over another number of devices fails at
its first all-reduce ("... is joining a group with size 4, but that group has
size 2"; tensorflow/tensorflow#61314). `distinct_collective_keys` gives each
strategy its own key range, as TensorFlow's own tests do
(tensorflow/python/distribute/strategy_combinations.py).
"""

import contextlib
import itertools
import logging

from mgpu_tf.compat import private

__all__ = ["distinct_collective_keys"]

logger = logging.getLogger("mgpu_tf")

_KEY_BLOCKS = itertools.count(1)
_KEY_BLOCK_SIZE = 1_000_000
_reported = set()


@contextlib.contextmanager
def distinct_collective_keys():
    """Makes the MirroredStrategy built inside the block use its own collective keys.

    `MirroredStrategy.__init__` reads where its keys start from a private class
    attribute (`mgpu_tf.compat.private.collective_key_base`); it is moved to a
    fresh block for the construction and put back after. On a TensorFlow without
    it, the block logs once and changes nothing.

    Example:

    ```python
    import tensorflow as tf
    from mgpu_tf import compat
    with compat.distinct_collective_keys():
        strategy = tf.distribute.MirroredStrategy(["CPU:0"])
    ```
    """
    import tensorflow as tf

    cls = tf.distribute.MirroredStrategy
    try:
        base = private.collective_key_base(cls)
    except private.PrivateNameError as error:
        if not _reported:
            _reported.add(True)
            logger.info("mgpu_tf: keeping TensorFlow's collective keys: %s", error)
        yield
        return
    private.set_collective_key_base(cls, base + _KEY_BLOCK_SIZE * next(_KEY_BLOCKS))
    try:
        yield
    finally:
        private.set_collective_key_base(cls, base)
