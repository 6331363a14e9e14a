"""The toolkit's part in a Keras optimizer's step: one hook object on the optimizer.

The optimizer patch (`mgpu_tf.compat.optimizer_hooks`) hands `build`, `apply`, the
all-reduce and the clipping to it; an optimizer without one runs Keras' own code.

Design: docs/design.md#state-on-objects
"""

import functools

from mgpu_tf.compat import optimizer_hooks
from mgpu_tf.compat.optimizer_hooks import HOOK_ATTRIBUTE

__all__ = ["OptimizerHook", "hook_of", "find", "require_patch"]


class OptimizerHook:
    """What one Keras optimizer does besides Keras' own code, and the state it keeps."""

    def __init__(self):
        # The communication comm.prepare installed (compression, steps_per_sync, transport
        # chosen); None before.
        self.communication = None
        # The options comm.prepare.install was given for it, which a later install must repeat.
        self.options = None
        # Sums the (gradient, variable) pairs over replicas in place of Keras' all-reduce.
        self.gradient_sum = None
        # Times each replica's wait in that all-reduce, for the monitor (callbacks.wait_clock).
        self.wait_clock = None
        # Gradient sums between syncs, which build and apply go through (comm.accumulation).
        self.accumulation = None
        # Updates and slots follow each variable's device (model_parallel.placement).
        self.placed = False
        # Slots in one slice per replica, which build, update and saving go through
        # (comm.sharded_state).
        self.sharded = None
        # Keras clips each replica's gradient before the all-reduce; True clips their sum
        # instead, as one device clips its gradient (comm.clipping).
        self.clips_sum = False

    def build(self, original, optimizer, variables):
        """Keras' `build`, then the accumulation's sums."""
        original(optimizer, variables)
        if self.accumulation is not None:
            self.accumulation.build(variables)

    def apply(self, original, optimizer, grads, trainable_variables=None):
        """Keras' `apply`: every step, or at each sync of the accumulation."""
        if self.accumulation is None:
            return original(optimizer, grads, trainable_variables)
        return self.accumulation.apply(original, grads, trainable_variables)

    def all_reduce(self, original, optimizer, grads_and_vars):
        """The gradients summed over replicas: by `gradient_sum` or Keras, timed by the clock,
        then clipped when `clips_sum`."""
        summing = self.gradient_sum or functools.partial(original, optimizer)
        if self.wait_clock is None:
            summed = summing(grads_and_vars)
        else:
            summed = self.wait_clock.around(summing, grads_and_vars)
        if not self.clips_sum:
            return summed
        summed = list(summed)
        clip = optimizer_hooks.keras_method("_clip_gradients")
        grads = clip(optimizer, [g for g, _ in summed])
        return [(g, v) for g, (_, v) in zip(grads, summed)]

    def clip(self, original, optimizer, grads):
        """Keras' clipping of each replica's gradients; none when `clips_sum` (the sum is
        clipped in `all_reduce`, or slice by slice in `comm.sharded_state`)."""
        if self.clips_sum:
            return grads
        return original(optimizer, grads)


def hook_of(optimizer):
    """The `OptimizerHook` of `optimizer`, made on first use."""
    hook = find(optimizer)
    if hook is None:
        hook = OptimizerHook()
        # Not through Keras' __setattr__, which would track the hook as optimizer state.
        object.__setattr__(optimizer, HOOK_ATTRIBUTE, hook)
    return hook


def require_patch(option):
    """Raises unless Keras' optimizer classes hand their step to the hook, as `make_strategy`
    makes them for a strategy that takes `option`; a hook nobody calls would change nothing."""
    if not optimizer_hooks.installed():
        raise ValueError(
            f"`{option}` acts through the optimizer patch, which make_strategy installs for "
            f"the strategies that take it. Received: {option} for an optimizer, with the patch "
            "not installed. Make the strategy with mgpu_tf.make_strategy(...), or call "
            "mgpu_tf.compat.patches.install('optimizer') first.")


def find(optimizer):
    """The `OptimizerHook` of `optimizer`, or None when it has none."""
    return getattr(optimizer, HOOK_ATTRIBUTE, None)
