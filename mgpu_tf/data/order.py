"""Where training is in its data: the epoch and the step the next input pipeline starts at.

`tf.data` reshuffles each time a data set is iterated again
(`reshuffle_each_iteration=True`), so an epoch's order depends on how many
iterators the process has made before it. Keras makes more of them under a
strategy than without one (it reads a first batch to build the model), and a
restarted process starts counting again, so neither the strategies nor a resumed
run see the order of an uninterrupted run on the default strategy.

Here the order of an epoch is a function of the seed and the epoch number only.
`mgpu_tf.shard_dataset`'s pipelines read the position when an iterator starts:
the epoch (which seeds the shuffle) and the steps of it already done (skipped,
after a mid-epoch resume). A Keras callback (`mgpu_tf.callbacks.DataOrder`, or
`mgpu_tf.callbacks.BackupAndRestore`, which restores the position too) moves the
position as training goes; without one, each new iterator of a pipeline starts
the next epoch, as `tf.data` does.

The position is per process: one `fit` at a time drives it.
"""

import logging
import threading

import numpy as np
import tensorflow as tf

__all__ = ["Reader", "epoch_seed", "follow", "release", "resume_at", "set_epoch",
           "finish_epoch", "position"]

logger = logging.getLogger("mgpu_tf")

_GRAPH_SEED = 87654321
_lock = threading.Lock()
_state = {"driven": False, "epoch": 0, "skip": 0, "resume": None}


def resume_at(epoch, steps_done):
    """Training resumes at `epoch`, with its first `steps_done` steps already done."""
    with _lock:
        _state["resume"] = (int(epoch), int(steps_done)) if steps_done else None


def set_epoch(epoch):
    """Epoch `epoch` starts: from its first step, or where `resume_at` said."""
    with _lock:
        resume = _state["resume"]
        skip = resume[1] if resume and resume[0] == epoch else 0
        _state.update(driven=True, epoch=int(epoch), skip=skip)


def finish_epoch(epoch):
    """Epoch `epoch` has done its last step: iterators made from now on start the next one.

    Keras makes the next epoch's iterator as soon as the last step of an epoch is
    done, before `on_epoch_begin` of the next; this keeps its order right.
    """
    with _lock:
        _state.update(driven=True, epoch=int(epoch) + 1, skip=0)
        if _state["resume"] and _state["resume"][0] <= epoch:
            _state["resume"] = None


def release():
    """Training ended: pipelines count their own iterators again."""
    with _lock:
        _state.update(driven=False, epoch=0, skip=0, resume=None)


def position():
    """`(epoch, steps to skip)` when a callback drives the position, else `None`."""
    with _lock:
        return (_state["epoch"], _state["skip"]) if _state["driven"] else None


class Reader:
    """One input pipeline's view of the position, read when one of its iterators starts.

    Args:
        shuffled: the epoch decides the order; then a second iterator with nothing
            driving the position logs, once per process, how to make the order
            follow the epoch.
    """

    _told = False

    def __init__(self, shuffled=False):
        self._iterators = 0
        self._shuffled = shuffled

    def __call__(self):
        current = position()
        if current is None:
            # Nothing drives the position: every iterator is the next epoch.
            current, self._iterators = (self._iterators, 0), self._iterators + 1
            if self._shuffled and self._iterators == 2 and not Reader._told:
                Reader._told = True
                logger.info(
                    "mgpu_tf: a data set from shard_dataset(shuffle_seed=...) is iterated "
                    "again with nothing telling it the epoch, so each new iterator takes "
                    "the next epoch's order, and Keras makes one more under a strategy. "
                    "Pass callbacks=[mgpu_tf.callbacks.DataOrder()] (or BackupAndRestore) "
                    "to fit for the same order under every strategy and after a restart.")
        return np.int64(current[0]), np.int64(current[1])


def follow(build, steps=None, *, skip_unit=1, shuffled=False):
    """Batches of the epoch at the position: `build(epoch)` with the done steps skipped.

    Args:
        build: a function of the epoch (a scalar `tf.int64` tensor) returning the
            epoch's batches.
        steps: batches per epoch, when known: the result then says so
            (`cardinality()`) though a resumed epoch yields fewer.
        skip_unit: batches per step. Defaults to 1.
        shuffled: the epoch decides the order (see `Reader`). Defaults to `False`.

    Returns:
        A `tf.data.Dataset` that reads the position each time it is iterated.
    """
    reader = Reader(shuffled)

    def read(_):
        epoch, skip = tf.numpy_function(reader, [], (tf.int64, tf.int64), stateful=True)
        return tf.reshape(epoch, []), tf.reshape(skip, []) * skip_unit

    start = tf.data.Dataset.from_tensors(np.int64(0)).map(read)

    def epoch_batches(epoch, skip):
        # The graph of this function gets its own graph-level seed: `shuffle` takes a
        # tensor seed only when that seed is not 0 (TensorFlow compares the seed pair
        # with (0, 0) in Python, and tf.random.set_seed(0) is common), and the order
        # then depends on `shuffle_seed` and the epoch only.
        tf.random.set_seed(_GRAPH_SEED)
        return build(epoch).skip(skip)

    # The pipeline code is graph code already: autograph need not rewrite it.
    batches = start.flat_map(tf.autograph.experimental.do_not_convert(epoch_batches))
    if steps is None:
        return batches
    # A data set that claims to be endless and is empty: `take(steps)` after it
    # states the cardinality Keras reads, and a short (resumed) epoch still ends.
    nothing = tf.data.Dataset.from_tensors(_zeros(batches.element_spec)).filter(
        lambda *_: tf.constant(False)).repeat()
    return batches.concatenate(nothing).take(steps)


def _zeros(spec):
    return tf.nest.map_structure(
        lambda s: tf.zeros([d if d is not None else 0 for d in s.shape], s.dtype), spec)


def epoch_seed(seed, epoch, salt=0):
    """A shuffle seed drawn from `(seed, epoch)`: the same on every worker and every run."""
    mixed = tf.random.stateless_uniform(
        [], seed=tf.stack([tf.constant(seed % 2**31, tf.int64),
                           tf.cast(epoch, tf.int64) * 4 + salt]),
        minval=0, maxval=2**31 - 1, dtype=tf.int64)
    return mixed
