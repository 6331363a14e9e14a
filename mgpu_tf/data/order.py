"""Where training is in its data: the epoch and the step the next input pipeline starts at.

An epoch's order is a function of the seed and the epoch number only; a callback (`DataOrder` or
`BackupAndRestore`, else the fit's follower) sets the `Position` held by the model's strategy,
which its pipelines read.

Design: docs/design.md#data-order-across-restarts
"""

import logging
import threading

import numpy as np
import tensorflow as tf

from mgpu_tf.compat import private_runtime
from mgpu_tf.strategies import kinds

__all__ = ["Position", "Reader", "epoch_seed", "follow", "keras_strategy", "position_of"]

logger = logging.getLogger("mgpu_tf")

_GRAPH_SEED = 87654321
# Log-once: the hint about DataOrder is given once per process.
_told = set()
_lock = threading.Lock()  # makes each strategy one Position; guards `_told`


class Position:
    """Where training is in the data of one strategy: callbacks set it, pipelines read it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._driven, self._epoch, self._skip = False, 0, 0
        self._resume = None  # (epoch, steps done) a backup resumes at
        self._run = 0  # counts the fits, so a reader knows a new one began
        self._epochs = None  # epochs of the fit that drives the position, when known
        self._set_in = None  # the fit in which a callback last called `set_epoch`

    def resume_at(self, epoch, steps_done):
        """Training resumes at `epoch`, with its first `steps_done` steps already done."""
        with self._lock:
            self._resume = (int(epoch), int(steps_done)) if steps_done else None

    def set_epoch(self, epoch, epochs=None):
        """Epoch `epoch` starts: from its first step, or where `resume_at` said.

        `epochs`, the fit's number of epochs when known, tells pipelines whether
        another epoch follows (`mgpu_tf.data.stream` then streams the epochs).
        """
        with self._lock:
            self._set_in = self._run
            self._set(epoch, epochs)

    def follow_epoch(self, epoch, epochs):
        """`set_epoch(epoch, epochs)` for a fit in which no callback called `set_epoch`.

        Returns whether it set the position.
        """
        with self._lock:
            if self._set_in == self._run:
                return False
            self._set(epoch, epochs)
            return True

    def _set(self, epoch, epochs):
        resume = self._resume
        self._skip = resume[1] if resume and resume[0] == epoch else 0
        self._driven, self._epoch = True, int(epoch)
        if epochs is not None:
            self._epochs = int(epochs)

    def epochs_left(self):
        """Epochs of the fit after the current one, or `None` when not known."""
        with self._lock:
            if not self._driven or self._epochs is None:
                return None
            return max(0, self._epochs - self._epoch - 1)

    def release(self):
        """Training ended: pipelines count their own iterators again."""
        with self._lock:
            self._driven, self._epoch, self._skip, self._resume = False, 0, 0, None
            self._epochs = None
            self._run += 1

    def current(self):
        """`(epoch, steps to skip)` when a callback drives the position, else `None`."""
        driven = self.driven()
        return driven and driven[:2]

    def driven(self):
        """`(epoch, steps to skip, which fit)` when a callback drives the position, else `None`."""
        with self._lock:
            return (self._epoch, self._skip, self._run) if self._driven else None


def keras_strategy(strategy):
    """The strategy a Keras model trained under `strategy` reports as `distribute_strategy`."""
    # model_parallel and hybrid models run outside any scope: under the default strategy.
    if isinstance(strategy, tf.distribute.Strategy):
        return strategy
    return private_runtime.default_strategy()


def position_of(strategy):
    """The `Position` of the data of models trained under `strategy`, made on first use."""
    record = kinds.kind_of(keras_strategy(strategy))
    with _lock:
        if record.position is None:
            record.position = Position()
        return record.position


class Reader:
    """One input pipeline's view of a `Position`, read when one of its iterators starts.

    Args:
        position: the `Position` it reads.
        shuffled: the epoch decides the order; then a second iterator with nothing
            driving the position logs, once per process, how to make the order
            follow the epoch.
        stream: it reads for a stream of epochs (`follow(..., endless=True)`), which
            ends, read as epoch -1, once the fit that drives the position has no more
            epochs or has ended.
    """

    def __init__(self, position, shuffled=False, stream=False):
        self._position = position
        self._stream = stream
        self._iterators = 0
        self._shuffled = shuffled
        self._last = None  # (epoch, run) of the previous iterator read while driven

    def __call__(self):
        epoch, skip = self._read()
        return np.int64(epoch), np.int64(skip)

    def _read(self):
        driven = self._position.driven()
        if driven is None:
            return (-1 if self._stream else self._next_iterator()), 0
        epoch, skip, run = driven
        if self._last is not None and self._last[1] == run and self._last[0] >= epoch:
            # This epoch's iterator was made already: this one is the next epoch's,
            # made before Keras' on_epoch_begin says so.
            epoch, skip = self._last[0] + 1, 0
        if self._stream and epoch > driven[0] + (self._position.epochs_left() or 0):
            return -1, 0  # past the fit's last epoch
        self._last = (epoch, run)
        return epoch, skip

    def _next_iterator(self):
        """Nothing drives the position: every iterator is the next epoch."""
        epoch, self._iterators = self._iterators, self._iterators + 1
        if self._shuffled and epoch == 1:
            _tell_once(
                "mgpu_tf: a data set from shard_dataset(shuffle_seed=...) is iterated again "
                "outside fit, with nothing telling it the epoch, so each new iterator takes "
                "the next epoch's order. A fit tells it the epoch; pass "
                "callbacks=[mgpu_tf.callbacks.DataOrder()] (or BackupAndRestore) to fit for "
                "the order of the fit's own epoch numbers, the same after a restart.")
        return epoch


def _tell_once(message):
    with _lock:
        if _told:
            return
        _told.add(True)
    logger.info(message)


def follow(build, reader, steps=None, *, skip_unit=1, endless=False):
    """Batches of the epoch `reader` gives: `build(epoch)` with the done steps skipped.

    Args:
        build: a function of the epoch (a scalar `tf.int64` tensor) returning the
            epoch's batches.
        reader: the `Reader` of the position, called once per epoch.
        steps: batches per epoch, when known: the result then says so
            (`cardinality()`) though a resumed epoch yields fewer.
        skip_unit: batches per step. Defaults to 1.
        endless: go on with the next epoch, read from `reader` again, after each one
            ends, until it reads epoch -1 (a stream `Reader`). Defaults to `False`.

    Returns:
        A `tf.data.Dataset` that reads the position each time an epoch of it starts.
    """

    def read(_):
        epoch, skip = tf.numpy_function(reader, [], (tf.int64, tf.int64), stateful=True)
        return tf.reshape(epoch, []), tf.reshape(skip, []) * skip_unit

    start = tf.data.Dataset.from_tensors(np.int64(0))
    if endless:
        start = start.repeat().map(read).take_while(lambda epoch, skip: epoch >= 0)
    else:
        start = start.map(read)

    def epoch_batches(epoch, skip):
        # The graph of this function gets its own graph-level seed: `shuffle` takes a
        # tensor seed only when that seed is not 0 (TensorFlow compares the seed pair
        # with (0, 0) in Python, and tf.random.set_seed(0) is common), and the order
        # then depends on `shuffle_seed` and the epoch only.
        tf.random.set_seed(_GRAPH_SEED)
        return build(epoch).skip(skip)

    # The pipeline code is graph code already: autograph need not rewrite it.
    batches = start.flat_map(tf.autograph.experimental.do_not_convert(epoch_batches))
    if steps is None or endless:
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
    return tf.random.stateless_uniform(
        [], seed=tf.stack([tf.constant(seed % 2**31, tf.int64),
                           tf.cast(epoch, tf.int64) * 4 + salt]),
        minval=0, maxval=2**31 - 1, dtype=tf.int64)
