"""Compressed all-reduces: gradients cast to 16 bits on the wire.

`compression="float16"` (or `"bfloat16"`): each replica's gradients are cast to
16 bits for the all-reduce and back to their dtype for the update, halving the
bytes sent, as Horovod's `Compression.fp16` does. Keras 3 all-reduces in
`TFOptimizer._all_reduce_sum_gradients` and has no such option.
`sum_gradients` is the frame every stand-in for that method shares.
"""


import tensorflow as tf

from mgpu_tf import Choice

__all__ = ["Compression", "check_compression", "compressed_all_reduce", "sum_gradients"]


class Compression(Choice):
    """The dtype gradients have on the wire during the all-reduce."""

    NONE = "none"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"


def check_compression(value):
    """Returns `value` as a `Compression`.

    Raises:
        ValueError: when it is not one of none, float16, bfloat16.
    """
    return Compression.parse(value, "compression")


def compressed_all_reduce(grads_and_vars, *, wire_dtype=tf.float16):
    """Sums `(gradient, variable)` pairs over replicas with gradients in `wire_dtype`.

    Stands in for Keras' `TFOptimizer._all_reduce_sum_gradients`: one all-reduce
    for all gradients, in replica context; outside it, the pairs come back as
    they are. `None` gradients stay `None`.
    """
    def total(grads):
        sent = [tf.cast(g, wire_dtype) if g.dtype.is_floating else g for g in grads]
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, sent)

    return sum_gradients(grads_and_vars, total)


def sum_gradients(grads_and_vars, total):
    """Sums `(gradient, variable)` pairs over replicas with `total(gradients)`.

    The frame of every stand-in for Keras' `_all_reduce_sum_gradients`: in
    replica context, `total` gets the gradients that are not `None` and returns
    their sums, each cast back here to its gradient's dtype; outside replica
    context, or with no gradient at all, the pairs come back as they are.
    """
    grads_and_vars = list(grads_and_vars)
    present = [i for i, (g, _) in enumerate(grads_and_vars) if g is not None]
    if not tf.distribute.get_replica_context() or not present:
        return grads_and_vars
    grads = [grads_and_vars[i][0] for i in present]
    out = list(grads_and_vars)
    for i, g, s in zip(present, grads, total(grads)):
        out[i] = (tf.cast(s, g.dtype), grads_and_vars[i][1])
    return out
