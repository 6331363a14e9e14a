"""Gradient clipping of the gradient summed over replicas, as one device clips its gradient.

Keras clips each replica's gradient before the all-reduce (`clipnorm`, `global_clipnorm`,
`clipvalue`); each is a share of the global gradient, so that is another clip than one
device's. Here the optimizer's hook holds Keras' clip back and clips the sum instead.

Design: docs/concepts.md#data-parallelism
"""

import numpy as np
import tensorflow as tf

from mgpu_tf.comm import optimizer_step
from mgpu_tf.compat import optimizer_hooks
from mgpu_tf.compat import private
from mgpu_tf.compat import versions

__all__ = ["clips", "clip_after_sum", "clip_slice"]


def clips(optimizer):
    """True when the Keras `optimizer` clips its gradients."""
    return any((getattr(optimizer, name, None) or 0) > 0
               for name in ("clipnorm", "global_clipnorm", "clipvalue"))


def clip_after_sum(optimizer):
    """Makes `optimizer` clip the gradient summed over replicas, not each replica's share.

    For strategies whose replicas sum their gradients in the optimizer's all-reduce. An
    optimizer that does not clip is left as it is; so is one whose class clips in a
    `_clip_gradients` of its own, and every one while the optimizer patch is not installed
    (both logged once).

    Args:
        optimizer: a Keras optimizer of the TensorFlow backend; inside a
            `LossScaleOptimizer`, the inner one clips.

    Returns:
        `optimizer`.
    """
    inner = optimizer
    while hasattr(inner, "inner_optimizer"):  # LossScaleOptimizer
        inner = inner.inner_optimizer
    if not clips(inner):
        return optimizer
    if not optimizer_hooks.installed():
        versions.log_once("the optimizer patch is not installed (make_strategy installs it), "
                          "so clipping acts on each replica's gradient, not their sum.")
        return optimizer
    keras_clip = private.optimizer_class_method("_clip_gradients")
    if private.optimizer_type_method(inner, "_clip_gradients") is not keras_clip:
        versions.log_once(f"{type(inner).__name__} clips in a _clip_gradients of its own, so "
                          "it clips each replica's gradient, not their sum.")
        return optimizer
    optimizer_step.hook_of(inner).clips_sum = True
    return optimizer


def clip_slice(optimizer, gradient, layout, replica, total):
    """Clips one replica's slice of the summed gradient as Keras clips the whole gradient.

    For `shard_optimizer_state`, where each replica receives only its slice of the sum:
    `clipvalue` acts on each number, `global_clipnorm` on the norm of all slices and
    `clipnorm` on each variable's norm over the slices holding it, both summed by `total`.

    Args:
        optimizer: the Keras optimizer whose `clipnorm`, `global_clipnorm` or `clipvalue`
            applies.
        gradient: slice `replica` of `layout`'s flat vector, 1-D.
        layout: the `mgpu_tf.comm.shard_layout.Layout` of the slices.
        replica: the slice's number.
        total: sums a 1-D float tensor over the replicas (every replica calls it).

    Returns:
        The clipped slice.
    """
    dtype = gradient.dtype
    if optimizer.clipnorm and optimizer.clipnorm > 0:
        count = len(layout.sizes)
        owner = np.full([layout.slice_size], count, np.int32)  # padding: a segment of its own
        at = 0
        for index, first, end in layout.pieces(replica):
            owner[at: at + end - first] = index
            at += end - first
        squares = tf.math.unsorted_segment_sum(tf.square(gradient), owner, count + 1)[:count]
        norms = tf.sqrt(total(squares))
        limit = tf.constant(optimizer.clipnorm, dtype)
        # tf.clip_by_norm's factor, as Keras' TensorFlow optimizer clips each variable.
        factors = tf.concat([limit / tf.maximum(norms, limit), tf.ones([1], dtype)], 0)
        return gradient * tf.gather(factors, owner)
    if optimizer.global_clipnorm and optimizer.global_clipnorm > 0:
        norm = tf.sqrt(total(tf.reshape(tf.reduce_sum(tf.square(gradient)), [1]))[0])
        limit = tf.constant(optimizer.global_clipnorm, dtype)
        # Keras' clip_by_global_norm: NaN for a norm that is not finite.
        scale = limit * tf.minimum(1.0 / norm, 1.0 / limit) + (norm - norm)
        return gradient * scale
    if optimizer.clipvalue and optimizer.clipvalue > 0:
        return tf.clip_by_value(gradient, -optimizer.clipvalue, optimizer.clipvalue)
    return gradient
