"""Optimizer methods patched once on Keras' classes, doing what each optimizer's record asks.

An optimizer whose `attached.OptimizerRecord` is empty runs Keras' own code.

Design: docs/design.md#state-on-objects
"""

import functools

from mgpu_tf.compat import attached, private

__all__ = ["install", "installed"]

_MARK = "_mgpu_tf_optimizer_hook"
_HOOKED = ("build", "apply", "_all_reduce_sum_gradients")


def installed():
    """True when Keras' optimizer classes run the hooks."""
    try:
        return all(getattr(private.optimizer_class_method(name), _MARK, False)
                   for name in _HOOKED)
    except private.PrivateNameError:
        return False


def install():
    """Patches `build`, `apply` and `_all_reduce_sum_gradients`; again changes nothing."""
    for name, hook in (("build", _build), ("apply", _apply),
                       ("_all_reduce_sum_gradients", _all_reduce_sum_gradients)):
        try:
            original = private.optimizer_class_method(name)
        except private.PrivateNameError:
            continue  # what needs it calls `private.require` first, and stops there
        if not getattr(original, _MARK, False):
            private.set_optimizer_class_method(name, _hooked(original, hook))


def _hooked(original, hook):
    @functools.wraps(original)
    def method(self, *args, **kwargs):
        return hook(original, self, *args, **kwargs)

    setattr(method, _MARK, True)
    return method


def _build(original, optimizer, variables):
    original(optimizer, variables)
    sums = attached.of_optimizer(optimizer).accumulation
    if sums is not None:
        sums.build(variables)


def _apply(original, optimizer, grads, trainable_variables=None):
    sums = attached.of_optimizer(optimizer).accumulation
    if sums is None:
        return original(optimizer, grads, trainable_variables)
    return sums.apply(original, grads, trainable_variables)


def _all_reduce_sum_gradients(original, optimizer, grads_and_vars):
    record = attached.of_optimizer(optimizer)
    all_reduce = record.all_reduce or functools.partial(original, optimizer)
    if record.wait_clock is None:
        return all_reduce(grads_and_vars)
    return record.wait_clock.around(all_reduce, grads_and_vars)
