"""The `bucket_bytes` option: gradients all-reduced in buckets while the backward pass runs.

In backward order (last layers first), each bucket's all-reduce needs only its own
gradients, so in the step's graph it starts while earlier layers' are computed; over the
tcp ring a communication thread (`BucketExchanger`) takes each, holding no TF thread.

Design: docs/design.md#gradient-buckets
"""

import collections
import functools
import queue
import threading
import time
import zlib

import numpy as np
import tensorflow as tf

from mgpu_tf.comm import compression
from mgpu_tf.comm import sparse

__all__ = ["BucketExchanger", "backward_buckets", "exchanger_of", "collective_all_reduce",
           "ring_all_reduce"]

# Tags the ring messages of the buckets, apart from those of the graph's own ring ops.
_OP = zlib.crc32(b"gradient buckets")
# How many bucket exchanges `BucketExchanger.timeline` keeps.
_TIMELINE = 1024


def backward_buckets(sizes, bucket_bytes):
    """Indices of gradients grouped into buckets of about `bucket_bytes`, last gradient first.

    A bucket closes once it holds `bucket_bytes` or more (`[40, 8, 40, 8]` at 44 gives
    `[[3, 2], [1, 0]]`), so one larger gradient makes a bucket of its own.

    Args:
        sizes: each gradient's bytes, in the optimizer's (forward) order.
        bucket_bytes: the bytes a bucket is filled to; `0` makes one bucket.

    Returns:
        A list of buckets, each a list of gradient indices, in the order to all-reduce them.
    """
    order = list(reversed(range(len(sizes))))
    if bucket_bytes <= 0:
        return [order] if order else []
    buckets, current, filled = [], [], 0
    for i in order:
        current.append(i)
        filled += sizes[i]
        if filled >= bucket_bytes:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


class BucketExchanger:
    """A worker's communication thread: all-reduces each bucket over the ring, in the order
    enqueued (which the step's control dependencies make the same on every worker).

    Args:
        ring: the `mgpu_tf.comm.ring.Ring` of the workers.

    Attributes:
        timeline: `(ticket, bytes, enqueued, started, finished)` of the latest exchanges,
            as `time.perf_counter()` values of this process.
    """

    def __init__(self, ring):
        self.ring = ring
        self.timeline = collections.deque(maxlen=_TIMELINE)
        self._pending = queue.Queue()
        self._done = {}
        self._failure = None
        self._finished = threading.Condition()
        self._tickets = 0
        self._ticket_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="mgpu_tf-buckets", daemon=True)
        self._thread.start()

    def enqueue(self, flat):
        """Hands 1-D array `flat` to the thread; returns its ticket (an `int64` scalar) at once."""
        if self._failure is not None:
            raise self._failure
        with self._ticket_lock:
            ticket = self._tickets
            self._tickets += 1
        # A copy: TensorFlow may reuse the buffer it lent once this function returns.
        self._pending.put((ticket, np.array(flat, copy=True), time.perf_counter()))
        return np.int64(ticket)

    def collect(self, ticket):
        """Waits for the sum of the bucket of `ticket`; returns it."""
        ticket = int(ticket)
        with self._finished:
            self._finished.wait_for(lambda: ticket in self._done or self._failure is not None)
            if ticket not in self._done:
                raise self._failure
            return self._done.pop(ticket)

    def _run(self):
        while True:
            ticket, flat, enqueued = self._pending.get()
            started = time.perf_counter()
            try:
                summed = self._all_reduce(flat)
            except Exception as error:  # noqa: BLE001 - every waiter must hear of it
                with self._finished:
                    self._failure = error
                    self._finished.notify_all()
                return
            self.timeline.append((ticket, flat.nbytes, enqueued, started, time.perf_counter()))
            with self._finished:
                self._done[ticket] = summed
                self._finished.notify_all()

    def _all_reduce(self, flat):
        ring = self.ring
        if ring.size == 1:
            return flat
        sizes = ring.chunk_sizes(flat.size)
        parts = np.split(flat, np.cumsum(sizes)[:-1])
        for step, (phase, out, into) in enumerate(ring.schedule()):
            received = ring.exchange(parts[out], sizes[into], op=_OP, step=step)
            parts[into] = parts[into] + received if phase == "reduce" else received
        return np.concatenate(parts)


def exchanger_of(connection):
    """The `BucketExchanger` of a `mgpu_tf.comm.transport.Connection`, made on first use."""
    if connection.buckets is None:
        connection.buckets = BucketExchanger(connection.ring)
    return connection.buckets


def _flatten(grads, bucket, wire):
    return tf.concat([tf.reshape(tf.cast(grads[i], wire), [-1]) for i in bucket], 0)


def _unflatten(grads, bucket, summed, out):
    sizes = [int(np.prod(grads[i].shape)) for i in bucket]
    for i, piece in zip(bucket, tf.split(summed, sizes)):
        out[i] = tf.reshape(piece, grads[i].shape)


def _sizes(grads, wire):
    return [int(np.prod(g.shape)) * tf.as_dtype(wire or g.dtype).size for g in grads]


def ring_all_reduce(grads_and_vars, *, connection, bucket_bytes, wire_dtype=None):
    """Sums `(gradient, variable)` pairs over the workers of `connection`, bucket by bucket;
    sparse gradients are gathered outside the buckets (`comm.sparse`).

    Each bucket gets an "enqueue" op, which needs only that bucket's gradients and hands
    it to the communication thread; the "collect" ops that wait for the sums come after
    the last enqueue, so none holds a TensorFlow thread while gradients are computed.
    """
    def total(grads):
        grads = [tf.convert_to_tensor(g) for g in grads]
        wire = tf.as_dtype(wire_dtype or grads[0].dtype)
        exchanger = exchanger_of(connection)
        tickets, after = [], connection.token.read_value()
        for bucket in backward_buckets(_sizes(grads, wire), bucket_bytes):
            flat = _flatten(grads, bucket, wire)
            with tf.control_dependencies([after]):  # the same enqueue order on every worker
                ticket = tf.numpy_function(exchanger.enqueue, [flat], tf.int64, stateful=True,
                                           name="bucket_enqueue")
            tickets.append((bucket, ticket, flat.shape))
            after = ticket
        out, sums = [None] * len(grads), []
        for bucket, ticket, shape in tickets:
            with tf.control_dependencies([after]):
                summed = tf.numpy_function(exchanger.collect, [ticket], wire, stateful=True,
                                           name="bucket_collect")
            summed.set_shape(shape)
            sums.append(summed)
            _unflatten(grads, bucket, summed, out)
        with tf.control_dependencies(sums):
            increment = connection.token.assign_add(1)
        with tf.control_dependencies([increment]):
            return [tf.identity(g) for g in out]

    return compression.sum_gradients(grads_and_vars, total, dense=True, gather=functools.partial(
        sparse.ring_all_gather_slices, connection, wire_dtype=wire_dtype))


def collective_all_reduce(grads_and_vars, *, bucket_bytes, wire_dtype=None):
    """Sums `(gradient, variable)` pairs over replicas with TensorFlow's collectives, one
    all-reduce per bucket in backward order."""
    def total(grads):
        context = tf.distribute.get_replica_context()
        out = [None] * len(grads)
        sizes = _sizes(grads, wire_dtype)
        for bucket in backward_buckets(sizes, bucket_bytes):
            sent = [tf.cast(grads[i], wire_dtype) if wire_dtype is not None
                    and grads[i].dtype.is_floating else grads[i] for i in bucket]
            for i, summed in zip(bucket, context.all_reduce(tf.distribute.ReduceOp.SUM, sent)):
                out[i] = summed
        return out

    return compression.sum_gradients(grads_and_vars, total, dense=True, gather=functools.partial(
        sparse.collective_all_gather_slices, wire_dtype=wire_dtype))
