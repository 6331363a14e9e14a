"""The `transport="tcp"` option: gradients cross between workers over `mgpu_tf.comm.ring`.

Design: docs/design.md#tcp-ring-all-reduce
"""

import functools
import weakref
import zlib

import numpy as np
import tensorflow as tf

from mgpu_tf import compat
from mgpu_tf.comm import compression
from mgpu_tf.base import kind as kind_lib
from mgpu_tf.comm.options import TRANSPORTS, check_transport
from mgpu_tf.comm import ring as ring_lib

__all__ = ["TRANSPORTS", "Connection", "check_transport", "connect", "ring_all_reduce",
           "ring_reduce_scatter", "ring_all_gather", "all_reduce_gradients"]

# How long a transfer waits for a neighbour when no timeout_seconds was given.
DEFAULT_TIMEOUT_SECONDS = 600.0


def _workers(strategy):
    """`(task_type, task_id, address)` of every worker in one fixed order, and this one's rank."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        raise ValueError(
            "transport='tcp' applies to strategy 'multi_worker'. Received: a "
            f"{type(strategy).__name__}. Drop transport or use make_strategy('multi_worker').")
    spec = resolver.cluster_spec().as_dict()
    tasks = []
    for task_type in ("chief", "worker"):
        jobs = spec.get(task_type, [])
        if isinstance(jobs, dict):
            jobs = [jobs[i] for i in sorted(jobs)]
        tasks += [(task_type, i, address) for i, address in enumerate(jobs)]
    if not tasks:  # a single process: no cluster at all
        return [("worker", 0, "127.0.0.1:0")], 0
    me = (resolver.task_type, resolver.task_id)
    rank = [(t, i) for t, i, _ in tasks].index(me)
    return tasks, rank


def _host(address):
    return address.rpartition(":")[0].strip("[]")


def connect(strategy, *, timeout_seconds=None):
    """The `Connection` of `strategy`'s workers, made on first use; every worker must call it.

    Each worker opens a port on its own host, the ports are all-gathered through
    the strategy, and each worker connects to the next one.

    Raises:
        ValueError: for a strategy other than multi_worker, or one with more
            than one replica per worker.
        mgpu_tf.comm.ring.PeerLostError: when a neighbour does not connect in time.
    """
    record = kind_lib.kind_of(strategy)
    if record.connection is not None:
        return record.connection
    tasks, rank = _workers(strategy)
    if strategy.num_replicas_in_sync != len(tasks):
        raise ValueError(
            "transport='tcp' needs one replica per worker. Received: "
            f"{strategy.num_replicas_in_sync} replicas on {len(tasks)} workers. Give each "
            "worker one device (e.g. CUDA_VISIBLE_DEVICES) or use transport='tensorflow'.")
    listener = ring_lib.listen(_host(tasks[rank][2]))
    port = listener.getsockname()[1]
    timeout = DEFAULT_TIMEOUT_SECONDS if timeout_seconds is None else timeout_seconds
    try:
        pairs = _all_gather(strategy, [[rank, port]])
        ports = {int(r): int(p) for r, p in pairs}
        peers = [(_host(address), ports[r]) for r, (_, _, address) in enumerate(tasks)]
        made = ring_lib.Ring(rank, peers, listener, timeout_seconds=timeout, names=[
            f"/job:{task_type}/task:{index} ({address})" for task_type, index, address in tasks])
    except BaseException:
        listener.close()
        raise
    weakref.finalize(strategy, made.close)  # the receiving thread would keep it alive
    made = Connection(made, _ordering_token(strategy))
    record.connection = made
    # The step's logs take the ring too: one collective fewer per step.
    compat.set_log_mean(strategy,
                        lambda logs: ring_all_reduce(made, logs, "logs") / made.ring.size)
    return made


class Connection:
    """A worker's ring and the variable that keeps its all-reduces in program order."""

    def __init__(self, ring, token):
        self.ring = ring
        self.token = token
        # The communication thread of `bucket_bytes` (comm.buckets), made on first use.
        self.buckets = None


def _ordering_token(strategy):
    """A counter variable local to this worker (no communication to read or write it)."""
    with strategy.scope():
        token = tf.Variable(0, dtype=tf.int64, trainable=False, name="ring_order",
                            synchronization=tf.VariableSynchronization.ON_READ,
                            aggregation=tf.VariableAggregation.SUM)
    return strategy.experimental_local_results(token)[0]


def _all_gather(strategy, rows):
    """Every worker's `rows` (int64), stacked in replica order, as numpy."""
    @tf.function
    def gather():
        return strategy.run(lambda: tf.distribute.get_replica_context().all_gather(
            tf.constant(rows, tf.int64), axis=0))

    return strategy.experimental_local_results(gather())[0].numpy()


def _run_ring(connection, parts, sizes, name, phases):
    """Runs the ring schedule's steps of `phases` on `parts` (one per chunk), in order.

    The steps wait for the ring's earlier operations and hold back its later ones.
    """
    ring = connection.ring
    with tf.control_dependencies([connection.token.read_value()]):
        parts = [None if p is None else tf.identity(p) for p in parts]
    op = zlib.crc32(name.encode())
    for step, (phase, out, into) in enumerate(ring.schedule()):
        if phase not in phases:
            continue
        exchange = functools.partial(ring.exchange, count=sizes[into], op=op, step=step)
        received = tf.numpy_function(exchange, [parts[out]], parts[out].dtype, stateful=True,
                                     name="ring_exchange")
        received.set_shape([sizes[into]])
        parts[into] = parts[into] + received if phase == "reduce" else received
    with tf.control_dependencies([p for p in parts if p is not None]):
        increment = connection.token.assign_add(1)
    with tf.control_dependencies([increment]):
        return [None if p is None else tf.identity(p) for p in parts]


def ring_all_reduce(connection, flat, name="all_reduce"):
    """Sums 1-D tensor `flat` over the workers of `connection`, in `flat`'s dtype.

    `name` tags the ring's messages (e.g. `"gradients"`, `"logs"`).
    """
    sizes = connection.ring.chunk_sizes(int(flat.shape[0]))
    return tf.concat(_run_ring(connection, tf.split(flat, sizes), sizes, name,
                               ("reduce", "gather")), 0)


def ring_reduce_scatter(connection, flat, name="reduce_scatter"):
    """Chunk `rank` of 1-D `flat` (cut in `ring.size` equal chunks) summed over the workers.

    The first half of the ring all-reduce: each worker sends `(N - 1) / N` of `flat`.
    """
    ring = connection.ring
    size = int(flat.shape[0]) // ring.size
    parts = tf.split(flat, [size] * ring.size)
    # The ring leaves chunk rank + 1 whole on each worker: feed it chunk `rank` there.
    rotated = [parts[(c - 1) % ring.size] for c in range(ring.size)]
    out = _run_ring(connection, rotated, [size] * ring.size, name, ("reduce",))
    return out[(ring.rank + 1) % ring.size]


def ring_all_gather(connection, chunk, name="all_gather"):
    """Every worker's 1-D `chunk` (all of one size), concatenated in rank order.

    The second half of the ring all-reduce, on the chunks `ring_reduce_scatter` leaves.
    """
    ring = connection.ring
    size = int(chunk.shape[0])
    rotated = [None] * ring.size
    rotated[(ring.rank + 1) % ring.size] = chunk
    out = _run_ring(connection, rotated, [size] * ring.size, name, ("gather",))
    return tf.concat([out[(j + 1) % ring.size] for j in range(ring.size)], 0)


def all_reduce_gradients(grads_and_vars, *, connection, wire_dtype=None):
    """Sums `(gradient, variable)` pairs over the workers through `connection`."""
    def total(grads):
        grads = [tf.convert_to_tensor(g) for g in grads]
        wire = tf.as_dtype(wire_dtype or grads[0].dtype)
        flat = tf.concat([tf.reshape(tf.cast(g, wire), [-1]) for g in grads], 0)
        summed = ring_all_reduce(connection, flat, "gradients")
        sizes = [int(np.prod(g.shape)) for g in grads]
        return [tf.reshape(piece, g.shape) for g, piece in zip(grads, tf.split(summed, sizes))]

    return compression.sum_gradients(grads_and_vars, total)
