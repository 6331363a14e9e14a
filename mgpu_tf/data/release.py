"""Iterators freed off the training thread.

TensorFlow's tf.data can wait seconds in an iterator's destructor, for the iterator's
autotuning thread (`RootDataset::Iterator::~Iterator`). Freed where Keras drops it, at an
epoch's start or as `fit` returns, that stalled the training thread while the other workers
waited in a collective for it. `IteratorRelease` keeps the iterators a data set hands to
`fit` and frees each from its own thread once nothing else holds it.

Design: docs/design.md#epoch-boundaries
"""

import atexit
import sys
import threading
import time

__all__ = ["IteratorRelease"]


class IteratorRelease:
    """Holds iterators, and frees each from a thread of its own once only it holds them.

    TensorFlow's wait at a free grows with the iterator's age (its autotuning thread sleeps
    periods that double as it runs), so each is freed promptly, and in parallel: one long
    wait never delays the next free. The watching thread runs while it holds any. An
    iterator still held by others after `max_seconds` (one of a reference cycle, which only
    the garbage collector frees) is let go, and freed where they drop it. At the
    interpreter's exit the frees under way are waited for (a thread stopped inside
    TensorFlow's destructor aborts the process).

    Args:
        check_seconds: how often the thread looks. Defaults to `0.05`.
        max_seconds: how long an iterator others hold is kept. Defaults to `3600`.
    """

    def __init__(self, check_seconds=0.05, max_seconds=3600.0):
        self.check_seconds = check_seconds
        self.max_seconds = max_seconds
        self.freed = 0  # iterators freed by its threads
        self._held = []  # [(iterator, monotonic time it was held from)]
        self._lock = threading.Condition()
        self._in_flight = 0  # frees under way
        self._closed = False  # the interpreter exits: nothing more is freed here
        self._registered = False  # `_close` runs at exit: while it watches or frees
        self._thread = None

    def hold(self, iterator):
        """Keeps `iterator` until only this object holds it; returns it."""
        with self._lock:
            self._held.append((iterator, time.monotonic()))
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="mgpu_tf-iterator-release")
                if not self._registered:
                    self._registered = True
                    atexit.register(self._close)
                self._thread.start()
        return iterator

    def _close(self):
        with self._lock:
            self._closed = True
            self._lock.wait_for(lambda: self._in_flight == 0)

    def _run(self):
        done = False
        while not done:
            time.sleep(self.check_seconds)
            boxes, let_go, now = [], [], time.monotonic()
            with self._lock:
                if self._closed:
                    return
                for index in range(len(self._held) - 1, -1, -1):
                    # The pair's reference and getrefcount's argument: no one else's.
                    if sys.getrefcount(self._held[index][0]) <= 2:
                        boxes.append([self._held.pop(index)[0]])
                    elif now - self._held[index][1] > self.max_seconds:
                        let_go.append(self._held.pop(index))
                self._in_flight += len(boxes)
                if not self._held:
                    self._thread, done = None, True
                    self._unregister()
            for box in boxes:
                threading.Thread(target=self._free, args=(box,), daemon=True,
                                 name="mgpu_tf-iterator-free").start()
            boxes.clear()
            let_go.clear()

    def _free(self, box):
        box.clear()  # the iterator's destructor runs here
        with self._lock:
            self._in_flight -= 1
            self.freed += 1
            self._unregister()
            self._lock.notify_all()

    def _unregister(self):
        # Under `_lock`: with nothing watched or under way, the exit has nothing to wait for
        # (and `atexit` no longer keeps this object).
        if self._thread is None and self._in_flight == 0 and self._registered:
            self._registered = False
            atexit.unregister(self._close)
