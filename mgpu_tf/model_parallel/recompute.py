"""Re-materialisation: a stage keeps only its input per micro-batch and recomputes the rest.

What fills a device in training is mostly activations, the tensors the forward pass
keeps for the backward pass. GPipe (and torchgpipe's `checkpoint=`) trades them for
time: a recomputed micro-batch keeps only the tensor entering the stage, and its
forward is run again, on the stage's device, just before its backward pass. The
last micro-batch's backward pass comes right after its forward, so `"except_last"`
(torchgpipe's default) keeps its activations and recomputes the others.

A recomputed forward must be the forward that ran: random layers (Dropout) draw
from `keras.random.SeedGenerator` states, and batch normalisation updates moving
statistics. So the stage's non-trainable state is read before each recomputed
micro-batch's forward, put back for its recomputation, and restored afterwards:
the same dropout masks are drawn, and no statistic is updated twice.
"""

import contextlib

import tensorflow as tf

from mgpu_tf import Choice

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


def stage_state(atoms):
    """The non-trainable variables of a stage's atoms: seed states, moving statistics."""
    seen, state = set(), []
    for atom in atoms:
        for variable in getattr(atom, "variables", []):
            if not variable.trainable and id(variable) not in seen:
                seen.add(id(variable))
                state.append(variable)
    return state


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
