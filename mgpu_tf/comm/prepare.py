"""How gradients cross the wire: compressed all-reduces and fewer of them.

Design: docs/design.md#gradient-compression
"""

import functools

import tensorflow as tf

from mgpu_tf.base import kind as kind_lib
from mgpu_tf.base import options as options_lib
from mgpu_tf.comm import accumulation
from mgpu_tf.comm import buckets
from mgpu_tf.comm import combinations
from mgpu_tf.comm import optimizer_step
from mgpu_tf.comm import sharded_files
from mgpu_tf.comm import sharded_state
from mgpu_tf.comm import transport as transport_lib
from mgpu_tf.comm.compression import Compression, check_compression, compressed_all_reduce
from mgpu_tf.compat import private

__all__ = ["settings", "options_of", "prepare", "install", "installed"]

_ALL_REDUCE = "TFOptimizer._all_reduce_sum_gradients"


def settings(strategy):
    """Returns the options of `strategy`'s settings that change the step (`{}` when none)."""
    try:
        return options_of(kind_lib.kind_of(strategy).settings)
    except (AttributeError, TypeError):  # not a strategy, or settings without these options
        return {}


def options_of(chosen):
    """The options of parsed settings that change the step, as `install` takes them."""
    if chosen is None:
        return {}
    out = {}
    if chosen.compression != Compression.NONE:
        out["compression"] = chosen.compression
    if chosen.steps_per_sync > 1:
        out["steps_per_sync"] = chosen.steps_per_sync
    # "auto" applies between workers only; elsewhere it is TensorFlow's own path.
    if chosen.transport == "tcp" or (chosen.transport == "auto"
                                     and getattr(chosen, "kind", None) == "multi_worker"):
        out["transport"] = chosen.transport
        out["timeout_seconds"] = chosen.timeout_seconds
    if chosen.shard_optimizer_state:
        out["shard_optimizer_state"] = True
    if chosen.bucket_bytes:
        out["bucket_bytes"] = chosen.bucket_bytes
    return out


def prepare(model, strategy):
    """Makes the optimizer of an already compiled `model` use `strategy`'s communication options.

    A model compiled later gets them from `compile` (the strategy kind's `prepare_optimizer`).
    Returns `model`.
    """
    chosen = settings(strategy)
    if chosen and getattr(model, "optimizer", None) is not None:
        install(model.optimizer, strategy, **chosen)
    return model


def _innermost(optimizer):
    while hasattr(optimizer, "inner_optimizer"):  # LossScaleOptimizer
        optimizer = optimizer.inner_optimizer
    return optimizer


def install(optimizer, strategy, *, compression=Compression.NONE, steps_per_sync=1,
            transport="tensorflow", timeout_seconds=None, shard_optimizer_state=False,
            bucket_bytes=0):
    """Makes a Keras optimizer all-reduce as a strategy's options say: compressed, every
    `steps_per_sync` steps, over tcp, in buckets, with its slots sharded.

    Works on the innermost optimizer (inside a `LossScaleOptimizer`). Again with the same
    options it changes nothing; with others it raises `ValueError`, since the first options
    shape the optimizer's variables and its ring. `compile` under the strategy keeps options
    installed before it.

    Args:
        optimizer: a Keras 3 optimizer of the TensorFlow backend.
        strategy: the strategy it runs under.
        compression: a `Compression` value. Defaults to `"none"`.
        steps_per_sync: steps per all-reduce. Defaults to `1`.
        transport: `"tensorflow"` (the default), `"tcp"` or `"auto"` (`transport.choose`);
            tcp connects the ring now, so every worker installs at the same point.
        timeout_seconds: how long the tcp ring waits for a neighbour.
        shard_optimizer_state: slots in slices (`comm.sharded_state`). Defaults to `False`.
        bucket_bytes: bytes per bucket all-reduced during the backward pass (`comm.buckets`);
            `0` (the default) all-reduces at once.

    Returns:
        The optimizer that now all-reduces this way.
    """
    outer, optimizer = optimizer, _innermost(optimizer)
    compression = check_compression(compression)
    asked = {"compression": compression, "steps_per_sync": steps_per_sync,
             "transport": transport, "timeout_seconds": timeout_seconds,
             "shard_optimizer_state": shard_optimizer_state, "bucket_bytes": bucket_bytes}
    if installed(optimizer):
        _refuse_other_options(optimizer_step.find(optimizer).options, asked)
        return optimizer
    combinations.refuse(kind_lib.kind_of(strategy).name, steps_per_sync=steps_per_sync,
                        shard_optimizer_state=shard_optimizer_state,
                        **combinations.optimizer_levels(optimizer))
    if shard_optimizer_state:
        sharded_state.check_optimizer(optimizer)  # before the tcp ring connects
    given, transport = transport, transport_lib.choose(strategy, optimizer, transport,
                                                       timeout_seconds=timeout_seconds)
    if given == "auto" and (transport, compression, steps_per_sync, shard_optimizer_state,
                            bucket_bytes) == ("tensorflow", Compression.NONE, 1, False, 0):
        return optimizer  # TensorFlow's own path, and no other option asked for
    record = optimizer_step.hook_of(optimizer)
    wire = None if compression == Compression.NONE else tf.as_dtype(compression.value)
    options_lib.refuse_buckets_with_sharding(
        {"bucket_bytes": bucket_bytes, "shard_optimizer_state": shard_optimizer_state})
    if transport == "tcp" or wire is not None or bucket_bytes:
        # Checked before the ring connects, so a missing name fails fast.
        private.require(optimizer, _ALL_REDUCE, argument="optimizer")
        optimizer_step.require_patch("transport" if transport == "tcp" else
                                     "bucket_bytes" if bucket_bytes else "compression")
    if transport == "tcp":
        connection = transport_lib.connect(strategy, timeout_seconds=timeout_seconds)
        record.gradient_sum = functools.partial(
            buckets.ring_all_reduce, bucket_bytes=bucket_bytes, connection=connection,
            wire_dtype=wire) if bucket_bytes else functools.partial(
            transport_lib.all_reduce_gradients, connection=connection, wire_dtype=wire)
    elif bucket_bytes:
        record.gradient_sum = functools.partial(
            buckets.collective_all_reduce, bucket_bytes=bucket_bytes, wire_dtype=wire)
    elif wire is not None:
        record.gradient_sum = functools.partial(compressed_all_reduce, wire_dtype=wire)
    if shard_optimizer_state:
        sharded_state.shard(optimizer, strategy, wire_dtype=wire)
        if outer is not optimizer:
            sharded_files.save_whole_inside(outer, optimizer)
    if steps_per_sync > 1:
        accumulation.accumulate(optimizer, strategy, steps_per_sync)
    record.communication = (compression, steps_per_sync, transport)
    record.options = asked
    return optimizer


def installed(optimizer):
    """True when `install` has given `optimizer` (or the one inside it) its communication."""
    found = optimizer_step.find(_innermost(optimizer))
    return found is not None and found.communication is not None


def _refuse_other_options(installed_options, asked):
    """Raises when a second `install` asks for options other than those in place."""
    differ = {name: value for name, value in asked.items() if installed_options[name] != value}
    if differ:
        had = ", ".join(f"{name}={installed_options[name]!r}" for name in differ)
        received = ", ".join(f"{name}={value!r}" for name, value in differ.items())
        raise ValueError(
            "`optimizer` already all-reduces with the options a first `install` gave it "
            f"({had}); they cannot change once installed. Received: {received}. Install "
            "once, before `compile` (whose own install then keeps them), or give the options "
            "to `make_strategy`.")
