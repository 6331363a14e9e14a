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

    The thread runs while it holds any. An iterator still held by others after
    `max_seconds` (one of a reference cycle, which only the garbage collector frees) is let
    go, and freed where they drop it. At the interpreter's exit a free under way is waited
    for (a thread stopped inside TensorFlow's destructor aborts the process), and the rest
    is left to the interpreter.

    Args:
        check_seconds: how often the thread looks. Defaults to `0.5`.
        max_seconds: how long an iterator others hold is kept. Defaults to `3600`.
    """

    def __init__(self, check_seconds=0.5, max_seconds=3600.0):
        self.check_seconds = check_seconds
        self.max_seconds = max_seconds
        self.freed = 0  # iterators freed by its thread
        self._held = []  # [(iterator, monotonic time it was held from)]
        self._lock = threading.Lock()
        self._freeing = threading.Lock()  # held while its thread frees
        self._closed = False  # the interpreter exits: nothing more is freed here
        self._thread = None

    def hold(self, iterator):
        """Keeps `iterator` until only this object holds it; returns it."""
        with self._lock:
            self._held.append((iterator, time.monotonic()))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="mgpu_tf-iterator-release")
                atexit.register(self._close)
                self._thread.start()
        return iterator

    def _close(self):
        with self._freeing:
            self._closed = True

    def _run(self):
        done = False
        while not done:
            time.sleep(self.check_seconds)
            with self._freeing:
                if self._closed:
                    return
                now, free, let_go = time.monotonic(), [], []
                with self._lock:
                    for index in range(len(self._held) - 1, -1, -1):
                        # The pair's reference and getrefcount's argument: no one else's.
                        if sys.getrefcount(self._held[index][0]) <= 2:
                            free.append(self._held.pop(index))
                        elif now - self._held[index][1] > self.max_seconds:
                            let_go.append(self._held.pop(index))
                    if not self._held:
                        self._thread, done = None, True
                        atexit.unregister(self._close)
                self.freed += len(free)
                # Outside `_lock`: a destructor may wait seconds, and `hold` must not.
                free.clear()
                let_go.clear()
