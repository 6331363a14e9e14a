"""The next epoch's iterator, made while the current epoch trains.

Keras makes a new iterator of its data set every epoch, and an iterator of a sharded data set
takes a while to give its first batch (a distributed iterator's set-up, the shuffle buffer).
`EpochsAhead` makes the next epoch's iterator in a thread as soon as the current one has read
its epoch, so that the next epoch's first step finds its batches ready.

Design: docs/design.md#epoch-boundaries
"""

import logging
import threading
import time

from mgpu_tf.data import order

__all__ = ["EpochsAhead"]

logger = logging.getLogger("mgpu_tf")

# How long the thread waits for the current iterator's pipelines to read their epoch.
_READ_TIMEOUT = 30.0
_POLL = 0.002


class EpochsAhead:
    """The iterators of one sharded data set, each made while the epoch before trains.

    A pipeline reads its epoch from the position when its iterator gives its first batch,
    not when the iterator is made (`mgpu_tf.data.order.Reader`), so an iterator made ahead
    reads the epoch it is used in. The next one is made once the current one has read its
    epoch, and only while a callback drives the position and says another epoch follows
    (`mgpu_tf.data.order.Position`). One that read before it was handed out is dropped.
    Keras' spare iterator of each epoch's end is served by the one made ahead, and
    serves again when the next epoch begins.

    Args:
        position: the `Position` the data set's pipelines read.
    """

    def __init__(self, position):
        self.position = position
        self.readers = []  # one per input pipeline of this process
        self.handed_ahead = 0  # iterators handed out that were made ahead
        self._lock = threading.Lock()
        self._ahead = None  # the `_Making` of the next iterator
        self._handed = None  # (iterator, reads when handed out) while a callback drives
        self._iterate = None

    def reader(self, shuffled):
        """A new pipeline's `Reader` of the position, watched by this object."""
        reader = order.Reader(self.position, shuffled)
        self.readers.append(reader)
        return reader

    def attach(self, dataset):
        """`dataset` (what `fit` takes), whose iterators now come from this object."""
        self._iterate = type(dataset).__iter__
        owner = self

        class Ahead(type(dataset)):
            def __iter__(self):
                return owner.next_iterator(self)

        Ahead.__name__ = Ahead.__qualname__ = type(dataset).__name__
        Ahead.epochs_ahead = self
        dataset.__class__ = Ahead
        return dataset

    def next_iterator(self, dataset):
        """The iterator of the epoch starting now; starts making the next one."""
        driven = self.position.driven() is not None
        handed, self._handed = self._handed, None
        if driven and handed is not None and self.reads() == handed[1]:
            # Keras makes a spare iterator at each epoch's end and a new one when the next
            # begins; the spare was never read, so it serves as the new one.
            self._handed = handed
            return handed[0]
        if driven and handed is not None and self.position.epochs_left() == 0:
            # The spare after the last epoch, which Keras never reads.
            return handed[0]
        with self._lock:
            making, self._ahead = self._ahead, None
        iterator = making.take() if making is not None else None
        if iterator is not None:
            self.handed_ahead += 1
        else:
            iterator = self.fresh(dataset)
        reads = self.reads()
        if driven:
            self._handed = (iterator, reads)
            if self.position.epochs_left():
                making = _Making(self, dataset, reads)
                with self._lock:
                    self._ahead = making
                making.start()
        return iterator

    def reads(self):
        """How often each pipeline has read the position so far."""
        return [reader.reads for reader in self.readers]

    def fresh(self, dataset):
        """A new iterator of `dataset`, made now."""
        return self._iterate(dataset)


class _Making:
    """The making of one iterator ahead, in a thread: first the current iterator reads
    its epoch (`before` + 1 reads), then the next is made and must not read."""

    def __init__(self, owner, dataset, before):
        self._owner, self._dataset = owner, dataset
        self._expected = [count + 1 for count in before]
        self._cancel = threading.Event()
        self._made = threading.Event()  # set when making began; the thread then ends soon
        self._iterator = None
        self._thread = threading.Thread(target=self._run, name="mgpu_tf-next-epoch",
                                        daemon=True)

    def start(self):
        self._thread.start()

    def take(self):
        """The iterator made ahead, or `None` when it is not ready or not usable."""
        self._cancel.set()
        if self._made.is_set():
            self._thread.join()
        iterator, self._iterator = self._iterator, None
        if iterator is not None and self._owner.reads() != self._expected:
            return None  # it read its epoch before it was handed out
        return iterator

    def _run(self):
        readers = self._owner.readers
        deadline = time.monotonic() + _READ_TIMEOUT
        while any(r.reads < n for r, n in zip(readers, self._expected)):
            if self._cancel.is_set() or time.monotonic() > deadline:
                return
            time.sleep(_POLL)
        if (self._owner.reads() != self._expected
                or not self._owner.position.epochs_left()):
            return  # another iterator read meanwhile, or the last epoch began
        self._made.set()
        try:
            self._iterator = self._owner.fresh(self._dataset)
        except Exception as error:  # noqa: BLE001 - the iterator is then made when needed
            logger.debug("mgpu_tf: the next epoch's iterator was not made ahead: %s", error)
