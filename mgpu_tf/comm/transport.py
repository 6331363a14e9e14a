"""The `transport="tcp"` option: gradients cross between workers over `mgpu_tf.comm.ring`.

Design: docs/design.md#tcp-ring-all-reduce
"""

import functools
import logging
import weakref
import zlib

import numpy as np
import tensorflow as tf

from mgpu_tf import compat
from mgpu_tf.compat import private
from mgpu_tf.base import kind as kind_lib
from mgpu_tf.cluster import job_secret
from mgpu_tf.cluster import tf_config
from mgpu_tf.comm import compression
from mgpu_tf.comm import optimizer_step
from mgpu_tf.comm import sparse
from mgpu_tf.comm.options import TRANSPORTS, check_transport
from mgpu_tf.comm import ring as ring_lib

__all__ = ["TRANSPORTS", "Connection", "check_transport", "choose", "connect", "ring_all_reduce",
           "ring_reduce_scatter", "ring_all_gather", "all_reduce_gradients"]

logger = logging.getLogger("mgpu_tf")

_ALL_REDUCE = "TFOptimizer._all_reduce_sum_gradients"
# How long a transfer waits for a neighbour when no timeout_seconds was given.
DEFAULT_TIMEOUT_SECONDS = 600.0


def _workers(strategy):
    """`(task_type, task_id, address)` of every worker in one fixed order, and this one's rank."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        raise ValueError(
            "transport='tcp' applies to strategy 'multi_worker'. Received: a "
            f"{type(strategy).__name__}. Drop transport or use make_strategy('multi_worker').")
    tasks = tf_config.training_tasks(resolver.cluster_spec().as_dict())
    if not tasks:  # a single process: no cluster at all
        return [("worker", 0, "127.0.0.1:0")], 0
    me = (resolver.task_type, resolver.task_id)
    rank = [(t, i) for t, i, _ in tasks].index(me)
    return tasks, rank


def _host(address):
    return address.rpartition(":")[0].strip("[]")


def connect(strategy, *, timeout_seconds=None, cpu_only=False):
    """The `Connection` of `strategy`'s workers, made on first use; every worker must call it.

    Each worker opens a port on its own host, the ports are all-gathered through
    the strategy, and each worker connects to the next one. With `cpu_only`, returns
    `None` instead, on every worker, when any worker has a GPU.

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
        rows = _all_gather(strategy, [[rank, port, int(_has_gpu(strategy))]])
        if cpu_only and rows[:, 2].any():
            listener.close()
            return None
        ports = {int(r): int(p) for r, p, _ in rows}
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


def _has_gpu(strategy):
    return any("GPU" in device.upper() for device in strategy.extended.worker_devices)


def choose(strategy, optimizer, transport, *, timeout_seconds=None):
    """The transport the optimizer's gradients take: `transport`, or what `"auto"` stands for.

    `"auto"`: the tcp ring between CPU workers with a job secret, one replica each, else
    TensorFlow's collectives (NCCL on GPUs); chosen once per strategy and logged. Every
    worker calls it at the same point (the workers all-gather whether they have GPUs).

    Returns:
        `"tensorflow"` or `"tcp"`; for `"tcp"` chosen by `"auto"`, the ring is connected.
    """
    if transport != "auto":
        return transport
    record = kind_lib.kind_of(strategy)
    if record.transport is None:
        record.transport, why = _auto(strategy, optimizer, timeout_seconds)
        if why:
            logger.info("mgpu_tf: transport 'auto' chose %r: %s.", record.transport, why)
    return record.transport


def _auto(strategy, optimizer, timeout_seconds):
    """`(transport, why)`; `why` is empty where transport does not apply."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "tensorflow", ""
    tasks, _ = _workers(strategy)
    if len(tasks) < 2:
        return "tensorflow", "one worker, nothing crosses between workers"
    if strategy.num_replicas_in_sync != len(tasks):
        return "tensorflow", (f"{strategy.num_replicas_in_sync} replicas on {len(tasks)} "
                              "workers, and the tcp ring takes one replica per worker")
    if job_secret.job_secret() is None:
        return "tensorflow", (f"no job secret ({job_secret.SECRET_VARIABLE}) for the tcp "
                              "ring's handshake; mgpu-tf launch and mgpu-tf k8s give one")
    try:
        private.require(optimizer, _ALL_REDUCE, argument="optimizer")
        optimizer_step.require_patch("transport")
    except (private.PrivateNameError, ValueError) as error:
        return "tensorflow", f"the tcp ring cannot take this optimizer's gradients: {error}"
    if connect(strategy, timeout_seconds=timeout_seconds, cpu_only=True) is None:
        return "tensorflow", "the workers have GPUs, where TensorFlow's collectives use NCCL"
    return "tcp", (f"{len(tasks)} CPU workers with a job secret, one replica each: the tcp "
                   "ring")


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

    `flat` may also be a list of 1-D tensors of one dtype: their concatenation is summed,
    without a copy of them made into one. `name` tags the ring's messages (e.g.
    `"gradients"`, `"logs"`). The whole ring runs in one op (`Ring.all_reduce`, pipelined),
    after the ring's earlier operations and before its later ones.
    """
    ring = connection.ring
    parts = list(flat) if isinstance(flat, (list, tuple)) else [flat]
    with tf.control_dependencies([connection.token.read_value()]):
        parts = [tf.identity(p) for p in parts]
    op = zlib.crc32(name.encode())

    def all_reduce(*arrays):
        return ring.all_reduce(arrays[0] if len(arrays) == 1 else list(arrays), op=op)

    summed = tf.numpy_function(all_reduce, parts, parts[0].dtype, stateful=True,
                               name="ring_all_reduce")
    lengths = [p.shape[0] for p in parts]
    summed.set_shape([None if None in lengths else sum(lengths)])
    with tf.control_dependencies([summed]):
        increment = connection.token.assign_add(1)
    with tf.control_dependencies([increment]):
        return tf.identity(summed)


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
    """Sums `(gradient, variable)` pairs over the workers through `connection`; sparse
    gradients are gathered (`comm.sparse`)."""
    def total(grads):
        grads = [tf.convert_to_tensor(g) for g in grads]
        wire = tf.as_dtype(wire_dtype or grads[0].dtype)
        summed = ring_all_reduce(
            connection, [tf.reshape(tf.cast(g, wire), [-1]) for g in grads], "gradients")
        sizes = [int(np.prod(g.shape)) for g in grads]
        return [tf.reshape(piece, g.shape) for g, piece in zip(grads, tf.split(summed, sizes))]

    return compression.sum_gradients(grads_and_vars, total, dense=True, gather=functools.partial(
        sparse.ring_all_gather_slices, connection, wire_dtype=wire_dtype))
