"""One iterator for all the epochs of a `fit`: the next epoch's batches are ready as it starts.

Keras makes a new iterator at every epoch's start (and a spare at its end), and a new iterator
of a sharded data set is slow to give its first batch. While the data's position is driven
and knows the fit's epochs, `EpochStream` hands the fit that trains from the data set one
iterator of a stream of epochs, each read from the position as the one before ends,
prefetched while it trains. A fit that no callback tells the epoch runs `follower()`.

Design: docs/design.md#epoch-boundaries
"""

import threading

import keras

from mgpu_tf.data import order
from mgpu_tf.data import release

__all__ = ["EpochStream"]


class EpochStream:
    """The iterators of one sharded data set: per epoch, or one stream of epochs per fit.

    Args:
        position: the `Position` the data set's pipelines read.
        make_stream: a function returning the data set (what `fit` takes) whose epochs
            follow one another without end, read from `reader(..., stream=True)` readers.
        steps: the steps of one epoch.
    """

    def __init__(self, position, make_stream, steps):
        self.position = position
        self.steps = steps
        self.streams_made = 0  # fits that trained from one stream of epochs
        self._make_stream = make_stream
        self._lock = threading.Lock()
        self._stream = None  # (the fit it serves, its data set, its iterator)
        self._iterate = None
        self._executions = None  # steps per execution of the fit that trains from it
        # Epochs that fits trained from it with only its follower telling the position;
        # and the follower of the fit in progress.
        self.epochs_followed = 0
        self._follower = None
        # Every iterator it hands out, freed off the training thread (data.release).
        self.release = release.IteratorRelease()

    def reader(self, shuffled, stream=False):
        """A new pipeline's `Reader` of the position (of a stream of epochs, `stream`)."""
        return order.Reader(self.position, shuffled, stream)

    def attach(self, dataset):
        """`dataset` (what `fit` takes), whose iterators now come from this object."""
        self._iterate = type(dataset).__iter__
        owner = self

        class Streamed(type(dataset)):
            def __iter__(self):
                return owner.iterator(self)

        Streamed.__name__ = Streamed.__qualname__ = type(dataset).__name__
        Streamed.epoch_stream = self
        dataset.__class__ = Streamed
        return dataset

    def train(self, steps_per_execution):
        """A `fit` starts training from the data set, running `steps_per_execution` steps
        per call; `None`: the fit ended, however, and no longer drives the position."""
        with self._lock:
            self._executions = steps_per_execution
            if steps_per_execution is None:  # the stream's iterator is freed once unused
                self._stream = None
                if self._follower is not None:
                    self.epochs_followed += self._follower.followed
                    self._follower = None
        if steps_per_execution is None and self.position.driven() is not None:
            self.position.release()

    def follower(self):
        """The callback of a `fit` that trains from the data set: when no other callback
        tells the position the epoch, it does, counting on from the epochs earlier such fits
        trained from this data set, so each epoch trained takes the next epoch's order."""
        with self._lock:
            self._follower = _FollowEpochs(self.position, self.epochs_followed)
            return self._follower

    def current(self):
        """The iterator of the stream of the fit in progress, or `None`."""
        with self._lock:
            return self._stream and self._stream[2]

    def iterator(self, dataset):
        """The stream's iterator inside a fit that trains from `dataset` and that a callback
        drives with its epoch count, when each of its calls ends with an epoch or inside one;
        else a new iterator of `dataset`, which gives one epoch."""
        driven = self.position.driven()
        if driven is None or self.position.epochs_left() is None:
            return self.release.hold(self._iterate(dataset))
        run = driven[2]
        with self._lock:
            if self._reads_whole_epochs(driven[1]):
                if self._stream is None or self._stream[0] != run:
                    stream = self._make_stream()
                    self._stream = (run, stream, self.release.hold(iter(stream)))
                    self.streams_made += 1
                return self._stream[2]
        return self.release.hold(self._iterate(dataset))

    def _reads_whole_epochs(self, skip):
        """Whether the fit's reads end where epochs end (after `skip` steps of a resumed
        epoch): a stream's epochs follow one another in one iterator, and only its end stops
        a read. Evaluation reads a batch more for Keras' symbolic build of the model, and
        an execution of several steps reads on into the next epoch when they do not divide
        the epoch's steps."""
        executions = self._executions
        return (executions is not None and self.steps % executions == 0
                and skip % executions == 0)


class _FollowEpochs(keras.callbacks.Callback):
    """Drives a `Position` through one fit's epochs, numbered on from `first`, unless
    another callback tells it the epoch."""

    def __init__(self, position, first):
        super().__init__()
        self.position, self.first = position, first
        self.followed = 0  # epochs begun that it told the position
        self._epochs = None

    def on_epoch_begin(self, epoch, logs=None):
        if self._epochs is None:  # Keras counts from initial_epoch up to `epochs`
            self._epochs = (self.params or {}).get("epochs", epoch + 1) - epoch
        if self.position.follow_epoch(self.first + self.followed, self.first + self._epochs):
            self.followed += 1
