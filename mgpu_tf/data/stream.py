"""One iterator for all the epochs of a `fit`: the next epoch's batches are ready as it starts.

Keras makes a new iterator at every epoch's start (and a spare at its end), and a new iterator
of a sharded data set is slow to give its first batch. While a callback drives the data's
position and knows the fit's epochs, `EpochStream` hands Keras one iterator of a stream of
epochs, each read from the position as the one before ends, prefetched while it trains.

Design: docs/design.md#epoch-boundaries
"""

import threading

from mgpu_tf.data import order

__all__ = ["EpochStream"]


class EpochStream:
    """The iterators of one sharded data set: per epoch, or one stream of epochs per fit.

    Args:
        position: the `Position` the data set's pipelines read.
        make_stream: a function returning the data set (what `fit` takes) whose epochs
            follow one another without end, read from `reader(..., stream=True)` readers.
    """

    def __init__(self, position, make_stream):
        self.position = position
        self.streams_made = 0  # fits that trained from one stream of epochs
        self._make_stream = make_stream
        self._lock = threading.Lock()
        self._stream = None  # (the fit it serves, its data set, its iterator)
        self._iterate = None

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

    def current(self):
        """The iterator of the latest fit's stream, or `None`."""
        with self._lock:
            return self._stream and self._stream[2]

    def iterator(self, dataset):
        """The stream's iterator inside a fit that a callback drives with its epoch count;
        else a new iterator of `dataset`, which gives one epoch."""
        driven = self.position.driven()
        if driven is None or self.position.epochs_left() is None:
            return self._iterate(dataset)
        run = driven[2]
        with self._lock:
            if self._stream is None or self._stream[0] != run:
                stream = self._make_stream()
                self._stream = (run, stream, iter(stream))
                self.streams_made += 1
            return self._stream[2]
