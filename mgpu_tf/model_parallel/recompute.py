"""Re-materialisation: a stage keeps only its input per micro-batch and recomputes the rest.

Design: docs/design.md#re-materialisation
"""

import contextlib

import tensorflow as tf

from mgpu_tf.base.choice import Choice

__all__ = ["Recompute", "check_recompute", "is_recomputed", "stage_state", "read",
           "replayed_state"]


class Recompute(Choice):
    """Which micro-batches a stage recomputes in the backward pass instead of keeping."""

    NEVER = "never"
    EXCEPT_LAST = "except_last"
    ALWAYS = "always"


def check_recompute(value):
    """Returns `value` as a `Recompute`, or raises naming the allowed values.

    Example:

    ```python
    >>> str(check_recompute("EXCEPT_LAST"))
    'except_last'
    ```
    """
    if isinstance(value, bool) or not isinstance(value, str):
        raise TypeError("`recompute` must be one of 'never', 'except_last', 'always'. "
                        f"Received: recompute={value!r}")
    return Recompute.parse(value, "recompute")


def is_recomputed(mode, microbatch, microbatches):
    """Whether micro-batch `microbatch` (of `microbatches`) is recomputed under `mode`."""
    if mode == Recompute.ALWAYS:
        return True
    return mode == Recompute.EXCEPT_LAST and microbatch < microbatches - 1


def stage_state(stage):
    """The non-trainable variables of a stage's layers: seed states, moving statistics."""
    return [variable for variable in stage.variables if not variable.trainable]


def read(state):
    """The values of `state` now, as tensors."""
    return [tf.identity(variable.value) for variable in state]


@contextlib.contextmanager
def replayed_state(state, before):
    """Sets `state` to `before` for a recomputation, and back to its current values after."""
    now = read(state)
    for variable, value in zip(state, before):
        variable.assign(value)
    yield
    for variable, value in zip(state, now):
        variable.assign(value)
