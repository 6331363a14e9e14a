"""Clipping of the gradient summed over replicas, as one device clips its gradient.

Keras clips each replica's share before the all-reduce; the optimizer's hook clips the sum.

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
    """Makes `optimizer` (the inner one of a `LossScaleOptimizer`) clip the gradient summed
    over replicas; returns it. Left as Keras made it: one that does not clip, one whose class
    has a `_clip_gradients` of its own, and any while the optimizer patch is not installed."""
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
    """Clips `gradient`, slice `replica` of `layout`'s summed flat gradient, as Keras clips the
    whole: `clipvalue` each number, `global_clipnorm` by the norm over all slices, `clipnorm`
    by each variable's norm over its slices; `total` sums a 1-D tensor over the replicas."""
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
