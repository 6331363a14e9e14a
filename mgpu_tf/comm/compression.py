"""Compressed all-reduces: gradients cast to 16 bits on the wire.

Design: docs/design.md#gradient-compression
"""

import tensorflow as tf

from mgpu_tf.comm import sparse
from mgpu_tf.comm.options import Compression, check_compression

__all__ = ["Compression", "check_compression", "compressed_all_reduce", "sum_gradients"]


def compressed_all_reduce(grads_and_vars, *, wire_dtype=tf.float16):
    """Sums `(gradient, variable)` pairs over replicas with gradients in `wire_dtype`."""
    def total(grads):
        sent = [tf.cast(g, wire_dtype) if g.dtype.is_floating else g for g in grads]
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, sent)

    return sum_gradients(grads_and_vars, total)


def sum_gradients(grads_and_vars, total, *, dense=False, gather=None):
    """Sums `(gradient, variable)` pairs over replicas with `total(gradients)`.

    `dense=True` hands `total` dense gradients of their variables' static shapes (one of a
    shape a `tf.cond` branch left unknown made whole), for a `total` that lays them out in
    one flat buffer; the sparse ones (`tf.IndexedSlices`) go to `gather(slices)`, which
    returns every replica's rows (`comm.sparse`), as TensorFlow's all-reduce does.
    """
    grads_and_vars = list(grads_and_vars)
    present = [i for i, (g, _) in enumerate(grads_and_vars) if g is not None]
    if not tf.distribute.get_replica_context() or not present:
        return grads_and_vars
    grads = [grads_and_vars[i][0] for i in present]
    summed = [None] * len(grads)
    if dense:
        if gather is None:
            raise ValueError("`dense=True` needs `gather` for the sparse gradients. "
                             "Received: gather=None.")
        dense_at, sparse_at = sparse.split_sparse(grads)
        grads = [g if k in sparse_at else _dense(g, grads_and_vars[present[k]][1])
                 for k, g in enumerate(grads)]
        if sparse_at:
            for k, s in zip(sparse_at, gather([grads[k] for k in sparse_at])):
                summed[k] = s
        if dense_at:
            for k, s in zip(dense_at, total([grads[k] for k in dense_at])):
                summed[k] = s
    else:
        summed = total(grads)
    out = list(grads_and_vars)
    for i, g, s in zip(present, grads, summed):
        out[i] = (tf.cast(s, g.dtype), grads_and_vars[i][1])
    return out


def _dense(grad, variable):
    grad = tf.convert_to_tensor(grad)
    return grad if grad.shape.is_fully_defined() else tf.reshape(grad, variable.shape)
