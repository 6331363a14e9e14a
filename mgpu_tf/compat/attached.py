"""What mgpu_tf keeps for a TensorFlow strategy or a Keras optimizer: one record on each.

Every piece of state the toolkit holds while training runs is a field of one of these two
records, so a reader finds it, and who sets it, here.

Design: docs/design.md#state-on-objects
"""

import dataclasses

__all__ = ["StrategyRecord", "OptimizerRecord", "of_strategy", "of_optimizer", "mark_sharded",
           "is_sharded"]

# Set with object.__setattr__: Keras' optimizer would track the record as its own state.
_ATTRIBUTE = "_mgpu_tf_record"
# On a data set shard_dataset returned, which orders its own examples (compat.shuffle_hook).
_SHARDED = "_mgpu_tf_sharded"


@dataclasses.dataclass(eq=False)
class StrategyRecord:
    """What mgpu_tf keeps for one strategy."""

    # The checked options make_strategy built it with; None for a strategy made elsewhere.
    settings: object = None
    # The tcp ring of mgpu_tf.comm.transport, made on first use.
    connection: object = None
    # Averages a worker's packed step logs over the workers in place of a collective.
    log_mean: object = None
    # The data position the callbacks set and the input pipelines read (data.order).
    position: object = None
    # Weak references to the adaptive shares of data sets sharded for it, oldest first.
    adaptive: list = dataclasses.field(default_factory=list)
    # Readies the optimizer of a model compiled under it: its communication (comm.prepare).
    ready_optimizer: object = None
    # Records in the TFRecord files sharded for it, by (path, size, modification time).
    record_counts: dict = dataclasses.field(default_factory=dict)
    # The sharding policies 'auto' chose for its data sets and logged: each shows once.
    logged_policies: set = dataclasses.field(default_factory=set)


@dataclasses.dataclass(eq=False)
class OptimizerRecord:
    """What mgpu_tf keeps for one Keras optimizer."""

    # The (compression, steps_per_sync, transport) comm.prepare installed; None before.
    communication: object = None
    # Sums its (gradient, variable) pairs over replicas in place of Keras' all-reduce.
    all_reduce: object = None
    # Times each replica's wait in that all-reduce, for the monitor (callbacks.wait_clock).
    wait_clock: object = None
    # Its gradient sums between syncs, which build and apply go through (comm.accumulation).
    accumulation: object = None
    # Its updates and slots follow each variable's device (model_parallel.placement).
    placed: bool = False
    # Its slots in one slice per replica, which build, update and saving go through
    # (comm.sharded_state).
    sharded: object = None


def _record(owner, make):
    record = getattr(owner, _ATTRIBUTE, None)
    if record is None:
        record = make()
        object.__setattr__(owner, _ATTRIBUTE, record)
    return record


def of_strategy(strategy):
    """The `StrategyRecord` of `strategy`, made empty on first use."""
    return _record(strategy, StrategyRecord)


def of_optimizer(optimizer):
    """The `OptimizerRecord` of `optimizer`, made empty on first use."""
    return _record(optimizer, OptimizerRecord)


def mark_sharded(data):
    """Marks `data` as made by `shard_dataset`; returns it."""
    object.__setattr__(data, _SHARDED, True)
    return data


def is_sharded(data):
    """True for a data set `mark_sharded` marked."""
    return getattr(data, _SHARDED, False) is True
