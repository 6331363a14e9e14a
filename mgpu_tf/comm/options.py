"""The options that shape communication, checked without TensorFlow.

Design: docs/design.md#layers
"""

import numbers

from mgpu_tf.base import registry
from mgpu_tf.base.choice import Choice
from mgpu_tf.cluster import options as _cluster  # noqa: F401 - before these in the table
from mgpu_tf.compat import versions

__all__ = ["Compression", "MAX_STEPS_PER_SYNC", "TRANSPORTS", "check_compression",
           "check_shard_optimizer_state", "check_steps_per_sync", "check_transport"]

# Gradient accumulation sums hundreds of steps at most; past this, an update may never come.
MAX_STEPS_PER_SYNC = 1024
TRANSPORTS = ("tensorflow", "tcp", "auto")


class Compression(Choice):
    """The dtype gradients have on the wire during the all-reduce."""

    NONE = "none"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"


def check_compression(value):
    """Returns `value` as a `Compression` (`ValueError` for another name)."""
    return Compression.parse(value, "compression")


def check_transport(value):
    """Returns `value` as one of `TRANSPORTS` (`ValueError` for anything else)."""
    name = value.lower() if isinstance(value, str) else value
    if name not in TRANSPORTS:
        raise ValueError(
            f"`transport` must be one of {', '.join(TRANSPORTS)}. Received: transport={value!r}")
    return name


def check_steps_per_sync(value):
    """Returns `steps_per_sync` as an `int` from 1 to `MAX_STEPS_PER_SYNC`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`steps_per_sync` must be an integer. Received: steps_per_sync={value!r}")
    if value < 1:
        raise ValueError(f"`steps_per_sync` must be at least 1. Received: steps_per_sync={value!r}")
    if value > MAX_STEPS_PER_SYNC:
        raise ValueError(
            f"`steps_per_sync` must be at most {MAX_STEPS_PER_SYNC}: the weights move once "
            f"every steps_per_sync steps, so with more a run may end before its first update. "
            f"Received: steps_per_sync={value}. Use a number of steps well below an epoch's.")
    return int(value)


def check_shard_optimizer_state(value):
    """Returns `shard_optimizer_state`; `True` needs Keras 3.10 or later."""
    if not isinstance(value, bool):
        raise TypeError(f"`shard_optimizer_state` must be True or False. "
                        f"Received: shard_optimizer_state={value!r}")
    if value:
        # Its sharded parameters are a Keras variable synchronized on read (Keras 3.10 on).
        versions.refuse_below("keras", (3, 10), "shard_optimizer_state")
    return value


_declare = registry.register_option
_declare("compression", "gradient dtype during the all-reduce: none, float16, bfloat16 "
         "(the update stays float32)", check_compression, type=str,
         choices=tuple(c.value for c in Compression), default=Compression.NONE,
         strategies=("mirrored", "multi_worker"), flag="string")
_declare("steps_per_sync", "steps whose gradients are summed locally before one all-reduce "
         "and one update (1: every step; shard_dataset refuses more than an epoch's steps)",
         check_steps_per_sync, type=int, minimum=1, maximum=MAX_STEPS_PER_SYNC, default=1,
         strategies=("mirrored", "multi_worker"), flag="integer")
_declare("transport", "how gradients travel between workers: tensorflow (its collectives), "
         "tcp (the toolkit's socket ring; one replica per worker) or auto (tcp between CPU "
         "workers with a job secret, one replica each; tensorflow otherwise)", check_transport,
         type=str, choices=TRANSPORTS, default="auto", strategies=("multi_worker",),
         flag="string")
_declare("shard_optimizer_state", "each replica keeps the optimizer slots of its 1/N slice "
         "of the variables only (ZeRO stage 1); element-wise optimizers",
         check_shard_optimizer_state, type=bool, default=False,
         strategies=("mirrored", "multi_worker"), flag="boolean")
_declare("sync_batch_norm", "BatchNormalization layers normalise with the global batch's "
         "statistics, all-reduced in each training step (Keras' synchronized=True)",
         type=bool, default=False, strategies=("mirrored", "multi_worker"), flag="boolean")
