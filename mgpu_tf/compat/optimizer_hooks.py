"""Optimizer methods patched once on Keras' classes, handing each step to the optimizer's hook.

An optimizer without a hook object (attribute `HOOK_ATTRIBUTE`, set by
`mgpu_tf.comm.optimizer_step`) runs Keras' own code.

Design: docs/design.md#state-on-objects
"""

import functools

from mgpu_tf.compat import private

__all__ = ["HOOK_ATTRIBUTE", "install", "installed", "keras_method"]

# The attribute of an optimizer holding its hook object.
HOOK_ATTRIBUTE = "_mgpu_tf_hook"

_MARK = "_mgpu_tf_optimizer_hook"
_HOOKED = ("build", "apply", "_all_reduce_sum_gradients", "_clip_gradients")


def installed():
    """True when Keras' optimizer classes run the hooks."""
    try:
        return all(getattr(private.optimizer_class_method(name), _MARK, False)
                   for name in _HOOKED)
    except private.PrivateNameError:
        return False


def install():
    """Patches `build`, `apply`, `_all_reduce_sum_gradients` and `_clip_gradients`; again
    changes nothing."""
    for name, hook in (("build", _build), ("apply", _apply),
                       ("_all_reduce_sum_gradients", _all_reduce_sum_gradients),
                       ("_clip_gradients", _clip_gradients)):
        try:
            original = private.optimizer_class_method(name)
        except private.PrivateNameError:
            continue  # what needs it calls `private.require` first, and stops there
        if not getattr(original, _MARK, False):
            private.set_optimizer_class_method(name, _hooked(original, hook))


def keras_method(name):
    """Keras' own optimizer method `name` (of those patched here), beneath the patch."""
    method = private.optimizer_class_method(name)
    while getattr(method, _MARK, False):
        method = method.__wrapped__
    return method


def _hooked(original, hook):
    @functools.wraps(original)
    def method(self, *args, **kwargs):
        return hook(original, self, *args, **kwargs)

    setattr(method, _MARK, True)
    return method


def _build(original, optimizer, variables):
    hook = getattr(optimizer, HOOK_ATTRIBUTE, None)
    if hook is None:
        return original(optimizer, variables)
    return hook.build(original, optimizer, variables)


def _apply(original, optimizer, grads, trainable_variables=None):
    hook = getattr(optimizer, HOOK_ATTRIBUTE, None)
    if hook is None:
        return original(optimizer, grads, trainable_variables)
    return hook.apply(original, optimizer, grads, trainable_variables)


def _all_reduce_sum_gradients(original, optimizer, grads_and_vars):
    hook = getattr(optimizer, HOOK_ATTRIBUTE, None)
    if hook is None:
        return original(optimizer, grads_and_vars)
    return hook.all_reduce(original, optimizer, grads_and_vars)


def _clip_gradients(original, optimizer, grads):
    hook = getattr(optimizer, HOOK_ATTRIBUTE, None)
    if hook is None:
        return original(optimizer, grads)
    return hook.clip(original, optimizer, grads)
