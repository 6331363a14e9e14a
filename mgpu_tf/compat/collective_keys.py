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

__all__ = ["distinct_collective_keys", "keeping_keys", "keeping_keys_in_one_process",
           "reused_instance_keys"]

logger = logging.getLogger("mgpu_tf")

_KEY_BLOCKS = itertools.count(1)
_KEY_BLOCK_SIZE = 1_000_000
_reported = set()


@contextlib.contextmanager
def _swapped(read, write, during, kind, keeping):
    """`write(during(old))` for the block and `old` back after; where `read` raises a
    PrivateNameError, logs `keeping` once per `kind` and changes nothing."""
    try:
        old = read()
    except private_runtime.PrivateNameError as error:
        if kind not in _reported:
            _reported.add(kind)
            logger.info("mgpu_tf: %s: %s", keeping, error)
        yield
        return
    write(during(old))
    try:
        yield
    finally:
        write(old)


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
    with _swapped(lambda: private_runtime.collective_key_base(cls),
                  lambda base: private_runtime.set_collective_key_base(cls, base),
                  lambda base: base + _KEY_BLOCK_SIZE * next(_KEY_BLOCKS),
                  "distinct", "keeping TensorFlow's collective keys"):
        yield


@contextlib.contextmanager
def reused_instance_keys(strategy):
    """Functions traced inside the block take their collectives' instance keys once.

    TensorFlow keeps about 1 KB per key for the life of the process (design.md#collective-keys).
    Both workers must trace at the same point. Without the private names, logs once.
    """
    def launcher():
        return private_collectives.collective_launchers(strategy)[0]

    with _swapped(lambda: private_collectives.unique_instance_keys(launcher()),
                  lambda unique: private_collectives.set_unique_instance_keys(launcher(), unique),
                  lambda unique: False, "reused", "a new collective instance key per call"):
        yield


def keeping_keys(function, strategy):
    """`function` run in `reused_instance_keys(strategy)`: wrap it in `tf.function`, so the
    swap happens only while it is traced, not at each call."""
    @functools.wraps(function)
    def call(*args, **kwargs):
        with reused_instance_keys(strategy):
            return function(*args, **kwargs)

    return call


def keeping_keys_in_one_process(function, strategy):
    """`keeping_keys(function, strategy)` where every replica is in this process (a
    MirroredStrategy over collective ops): they trace together, so no retrace can shift
    their keys. `function` itself under any other strategy or cross-device ops."""
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.MirroredStrategy):
        return function
    try:
        private_collectives.collective_launchers(strategy)
    except private_runtime.PrivateNameError:
        return function  # other cross-device ops: they take no instance keys
    return keeping_keys(function, strategy)
