"""Sparse gradients (`tf.IndexedSlices`, an Embedding's) across the tcp ring: gathered, not
summed, as TensorFlow's collectives gather them.

Keras applies a sparse gradient row by row, a row that appears twice counted twice (Adam's
second moment adds each occurrence's square), so summing a sparse gradient densely changes
the update of every optimizer but the linear ones. Each worker sends its rows and their
indices; every worker receives all of them, in rank order, and applies them sparsely.

Design: docs/concepts.md#sparse-gradients
"""

import zlib

import numpy as np
import tensorflow as tf

__all__ = ["SPARSE_AS_DENSE", "all_gather_bytes", "collective_all_gather_slices", "is_sparse",
           "refuse_summed", "ring_all_gather_slices", "split_sparse"]

_COUNT = np.dtype("<i8")
# Optimizers whose update of a sparse gradient is that of its dense sum: linear in the
# gradient until the rows are summed (Lion's sign comes after its momentum's sum).
SPARSE_AS_DENSE = ("SGD", "Lion")


def is_sparse(gradient):
    """True for a `tf.IndexedSlices` gradient."""
    return isinstance(gradient, tf.IndexedSlices)


def split_sparse(grads):
    """`(dense positions, sparse positions)` of the gradients in `grads`."""
    sparse = [i for i, g in enumerate(grads) if is_sparse(g)]
    return [i for i in range(len(grads)) if i not in sparse], sparse


def all_gather_bytes(ring, payload, op):
    """Every worker's uint8 `payload` (of any length), as a list in rank order.

    Two passes around the ring: the lengths, then the payloads, each worker sending on
    what it received from its left.
    """
    payload = np.ascontiguousarray(payload, np.uint8).reshape(-1)
    n, r = ring.size, ring.rank
    out = [None] * n
    out[r] = payload
    if n == 1:
        return out
    sizes = [0] * n
    sizes[r] = payload.size
    for step in range(n - 1):
        send, into = (r - step) % n, (r - step - 1) % n
        got = ring.exchange(np.array([sizes[send]], _COUNT), 1, op=op, step=step)
        sizes[into] = int(got[0])
    for step in range(n - 1):
        send, into = (r - step) % n, (r - step - 1) % n
        out[into] = ring.exchange(out[send], sizes[into], op=op, step=n + step)
    return out


def _pack(arrays):
    """One uint8 buffer: the element count of each array, then their bytes."""
    counts = np.array([a.size for a in arrays], _COUNT)
    return np.concatenate([counts.view(np.uint8)]
                          + [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays])


def _unpack(buffer, dtypes):
    counts = buffer[:len(dtypes) * _COUNT.itemsize].view(_COUNT)
    out, at = [], len(dtypes) * _COUNT.itemsize
    for count, dtype in zip(counts, dtypes):
        nbytes = int(count) * dtype.itemsize
        out.append(buffer[at:at + nbytes].view(dtype))
        at += nbytes
    return out


def ring_all_gather_slices(connection, slices, name="sparse_gradients", wire_dtype=None):
    """Every worker's rows of each `tf.IndexedSlices` in `slices`, concatenated in rank order.

    One ring operation for them all, after the ring's earlier operations and before its later
    ones; values travel in `wire_dtype` (compression), indices as int64.

    Returns:
        A list of `tf.IndexedSlices`, the k-th with `slices[k]`'s dense shape and dtype.
    """
    ring = connection.ring
    wires = [tf.as_dtype(wire_dtype or s.values.dtype) for s in slices]
    with tf.control_dependencies([connection.token.read_value()]):
        parts = []
        for s, wire in zip(slices, wires):
            parts += [tf.cast(s.indices, tf.int64), tf.reshape(tf.cast(s.values, wire), [-1])]
    dtypes = [np.dtype(p.dtype.as_numpy_dtype) for p in parts]
    op = zlib.crc32(name.encode())

    def gather(*arrays):
        received = [_unpack(b, dtypes) for b in all_gather_bytes(ring, _pack(arrays), op)]
        return [np.concatenate([worker[k] for worker in received])
                for k in range(len(arrays))]

    gathered = tf.numpy_function(gather, parts, [p.dtype for p in parts], stateful=True,
                                 name="ring_gather_slices")
    with tf.control_dependencies(gathered):
        increment = connection.token.assign_add(1)
    out = []
    with tf.control_dependencies([increment]):
        for k, s in enumerate(slices):
            indices, values = gathered[2 * k], gathered[2 * k + 1]
            indices.set_shape([None])
            rows = s.values.shape[1:]
            values = tf.reshape(tf.identity(values), [-1] + rows.as_list()
                                if rows.is_fully_defined() else tf.concat(
                                    [[-1], tf.shape(s.values)[1:]], 0))
            out.append(tf.IndexedSlices(tf.cast(values, s.values.dtype),
                                        tf.cast(tf.identity(indices), s.indices.dtype),
                                        s.dense_shape))
    return out


def collective_all_gather_slices(slices, wire_dtype=None):
    """TensorFlow's all-reduce of `tf.IndexedSlices` (an all-gather of their rows), values in
    `wire_dtype`."""
    context = tf.distribute.get_replica_context()
    sent = [tf.IndexedSlices(tf.cast(s.values, wire_dtype), s.indices, s.dense_shape)
            if wire_dtype is not None else s for s in slices]
    return list(context.all_reduce(tf.distribute.ReduceOp.SUM, sent))


def refuse_summed(optimizer, grads, variables):
    """Raises `ValueError` for a sparse gradient that `shard_optimizer_state` would sum into
    slices, where `optimizer` updates its rows otherwise than their sum."""
    name = type(optimizer).__name__
    sparse = [v.name for g, v in zip(grads, variables) if isinstance(g, tf.IndexedSlices)]
    if sparse and name not in SPARSE_AS_DENSE:
        raise ValueError(
            "shard_optimizer_state sums a sparse gradient (tf.IndexedSlices, an Embedding's) "
            f"into each replica's slice, and {name} updates a sparse gradient row by row, a "
            "row met twice counted twice: the update would differ from one device's. "
            f"Received: sparse gradients for {sparse} with optimizer={name}. Use "
            f"{' or '.join(SPARSE_AS_DENSE)}, or drop shard_optimizer_state.")
