"""Compressed all-reduces: gradients cast to 16 bits on the wire.

Design: docs/design.md#gradient-compression
"""

import tensorflow as tf

from mgpu_tf.comm.options import Compression, check_compression

__all__ = ["Compression", "check_compression", "compressed_all_reduce", "sum_gradients"]


def compressed_all_reduce(grads_and_vars, *, wire_dtype=tf.float16):
    """Sums `(gradient, variable)` pairs over replicas with gradients in `wire_dtype`."""
    def total(grads):
        sent = [tf.cast(g, wire_dtype) if g.dtype.is_floating else g for g in grads]
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, sent)

    return sum_gradients(grads_and_vars, total)


def sum_gradients(grads_and_vars, total, *, dense=False):
    """Sums `(gradient, variable)` pairs over replicas with `total(gradients)`.

    `dense=True` hands `total` dense gradients of their variables' static shapes (a
    sparse gradient, or one of a shape a `tf.cond` branch left unknown, made whole), for
    a `total` that lays them out in one flat buffer.
    """
    grads_and_vars = list(grads_and_vars)
    present = [i for i, (g, _) in enumerate(grads_and_vars) if g is not None]
    if not tf.distribute.get_replica_context() or not present:
        return grads_and_vars
    grads = [grads_and_vars[i][0] for i in present]
    if dense:
        grads = [_dense(g, grads_and_vars[i][1]) for i, g in zip(present, grads)]
    out = list(grads_and_vars)
    for i, g, s in zip(present, grads, total(grads)):
        out[i] = (tf.cast(s, g.dtype), grads_and_vars[i][1])
    return out


def _dense(grad, variable):
    grad = tf.convert_to_tensor(grad)
    return grad if grad.shape.is_fully_defined() else tf.reshape(grad, variable.shape)
