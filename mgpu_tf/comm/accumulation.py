"""Gradient accumulation across steps: one all-reduce and one update every k steps.

Design: docs/design.md#gradient-accumulation
"""

import contextlib
import functools
import logging

import tensorflow as tf

from mgpu_tf.comm import optimizer_step
from mgpu_tf.compat import private

__all__ = ["accumulate", "of_last_sync", "reset", "steps_since_sync"]

def steps_since_sync(optimizer):
    """Steps whose gradients `optimizer` holds in its sums, not yet applied; 0 without accumulation.

    A backup taken when this is 0 needs no per-replica sums: they are all zero.
    """
    state = getattr(optimizer_step.find(optimizer), "accumulation", None)
    if state is None or not state.built:
        return 0
    return int(state.count.numpy())


@contextlib.contextmanager
def of_last_sync(optimizer):
    """Keras files saved inside hold the last sync point (where the weights, slots and
    `iterations` last changed), whole, and a log line names the steps summed since; for
    `mgpu_tf.callbacks.ModelCheckpoint`. Other Keras files between sync points are refused."""
    state = getattr(optimizer_step.find(optimizer), "accumulation", None)
    if state is None:
        yield
        return
    state.of_last_sync = True
    try:
        yield
    finally:
        state.of_last_sync = False


def reset(optimizer):
    """Empties `optimizer`'s sums and restarts its count, as at a sync point (for a restore)."""
    state = getattr(optimizer_step.find(optimizer), "accumulation", None)
    if state is None or not state.built:
        return
    for variable in state.sums:
        for local in state.strategy.experimental_local_results(variable):
            local.assign(tf.zeros(local.shape, local.dtype))
    for rows in state.rows:
        rows.empty(state.strategy)
    state.count.assign(0)


def check_epoch(settings, steps, global_batch_size):
    """Refuses, for a strategy's parsed `settings` (`None`: made elsewhere), a `steps_per_sync`
    longer than an epoch of `steps`: an epoch without an update."""
    steps_per_sync = 1 if settings is None else settings.steps_per_sync
    if steps_per_sync > steps:
        raise ValueError(
            f"`steps_per_sync` must be at most the steps of an epoch ({steps}), or whole "
            "epochs would pass without an update and without a backup (taken at sync points "
            f"only). Received: steps_per_sync={steps_per_sync} for {steps} steps of "
            f"global_batch_size={global_batch_size}. Use steps_per_sync<={steps} "
            "in make_strategy, or a smaller global_batch_size.")


def accumulate(optimizer, strategy, steps_per_sync):
    """Makes `optimizer.apply` all-reduce and update every `steps_per_sync` calls.

    The sums and the count are the optimizer's: TensorFlow checkpoints of it hold them
    (`optimizer.gradient_accumulation`); a Keras file cannot, and saving one between
    sync points raises.

    Args:
        optimizer: a Keras 3 optimizer (not a `LossScaleOptimizer`).
        strategy: the strategy the optimizer runs under.
        steps_per_sync: steps per all-reduce, at least 2.

    Returns:
        `optimizer`, whose `apply` now accumulates.

    Raises:
        mgpu_tf.compat.private.PrivateNameError: when this Keras lacks a private
            name accumulation needs (checked here, not in the training step).
    """
    private.require(optimizer, "BaseOptimizer._trainable_variables",
                    "BaseOptimizer._get_variable_index", argument="optimizer")
    optimizer_step.require_patch("steps_per_sync")
    state = _State(optimizer, strategy, steps_per_sync)
    optimizer_step.hook_of(optimizer).accumulation = state
    private.wrap_optimizer_method(optimizer, "save_own_variables",
                                  lambda original: functools.partial(state.save, original))
    private.wrap_optimizer_method(optimizer, "load_own_variables",
                                  lambda original: functools.partial(state.load, original))
    if optimizer.built:
        state.build(private.optimizer_variables(optimizer))
    return optimizer


class _State:
    """The per-replica sums of gradients and the count of steps since the last update."""

    def __init__(self, optimizer, strategy, steps):
        self.optimizer = optimizer
        self.strategy = strategy
        self.steps = steps
        self.built = False
        # The variables (by the optimizer's index) whose gradients are sparse, seen as the
        # step is traced.
        self.sparse = set()
        # True while a model checkpoint saves the last sync point (`of_last_sync`).
        self.of_last_sync = False

    def build(self, variables):
        if self.built:
            return
        with self.strategy.scope():
            # ON_READ: each replica adds to its own copy without synchronising.
            self.sums = [
                tf.Variable(
                    tf.zeros(v.shape, _dtype(v)), trainable=False,
                    synchronization=tf.VariableSynchronization.ON_READ,
                    aggregation=tf.VariableAggregation.SUM, name="gradient_sum")
                for v in variables
            ]
            self.count = tf.Variable(0, dtype=tf.int64, trainable=False,
                                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                                     name="steps_since_sync")
            # A sparse gradient's rows, kept as rows until the sync (comm.sparse says why).
            self.rows = [_Rows(v) for v in variables]
        # An attribute of the optimizer, so that TensorFlow checkpoints of it hold them
        # (each sum as its total over the replicas, shared out again on restore).
        self.optimizer.gradient_accumulation = _Tracked(self.sums, self.count)
        self.built = True

    def save(self, original_save, store):
        """The optimizer's `save_own_variables` (Keras files), which cannot hold the sums:
        refused between sync points."""
        steps = steps_since_sync(self.optimizer)
        if steps and self.of_last_sync:
            logging.getLogger("mgpu_tf").info(
                "The model checkpoint holds the state of the last sync point, %d step(s) "
                "before this one: steps_per_sync=%d sums those steps' gradients until the "
                "next.", steps, self.steps)
        elif steps:
            raise ValueError(
                f"A Keras file (model.save, model.save_weights, Keras' BackupAndRestore or "
                f"ModelCheckpoint) cannot hold the gradient sums of steps_per_sync={self.steps}, "
                f"and {steps} step(s) have been summed since the last sync point: the file "
                f"would resume without them. Received: a save of optimizer "
                f"'{self.optimizer.name}' {steps} step(s) after a sync point. Save after a "
                f"multiple of {self.steps} steps, or through tf.train.Checkpoint(optimizer=...), "
                "which holds the sums, or mgpu_tf.callbacks.BackupAndRestore, which waits "
                "for a sync point, or mgpu_tf.callbacks.ModelCheckpoint, which saves the "
                "last sync point.")
        return original_save(store)

    def load(self, original_load, store):
        """The optimizer's `load_own_variables`: a Keras file is of a sync point, where the
        sums are empty."""
        original_load(store)
        reset(self.optimizer)

    def apply(self, original_apply, grads, trainable_variables=None):
        """The optimizer's `apply`: adds to the sums; at a sync point, `original_apply`s them."""
        optimizer = self.optimizer
        if not optimizer.built:
            optimizer.build(list(trainable_variables))
        built_for = private.optimizer_variables(optimizer)
        variables = list(trainable_variables or built_for)
        if not self.built:
            self.build(built_for)
        context = tf.distribute.get_replica_context()
        if context is None:
            raise ValueError(
                "An optimizer with steps_per_sync > 1 must apply gradients in replica "
                "context (inside strategy.run, as Keras fit does). Received: a call in "
                "cross-replica context.")
        self.add(grads, variables)
        context.merge_call(_maybe_apply, args=(self, original_apply, variables))

    def _sum(self, variable):
        return self.sums[private.variable_index(self.optimizer, variable)]

    def add(self, grads, variables):
        for g, v in zip(grads, variables):
            if isinstance(g, tf.IndexedSlices):
                index = private.variable_index(self.optimizer, v)
                self.sparse.add(index)
                self.rows[index].append(g)
            elif g is not None:
                self._sum(v).assign_add(tf.convert_to_tensor(g))

    def take(self, variables):
        """The replica's mean gradient since the last update; the sums restart at zero.

        A variable whose gradients were sparse gets every step's rows, each divided by the
        steps, as one device gets the rows of these steps' examples in one batch.
        """
        indices = [private.variable_index(self.optimizer, v) for v in variables]
        grads = [self.rows[i].read(self.steps) if i in self.sparse
                 else tf.identity(self.sums[i].read_value()) / self.steps for i in indices]
        with tf.control_dependencies(tf.nest.flatten(grads, expand_composites=True)):
            resets = [self.rows[i].clear() if i in self.sparse
                      else self.sums[i].assign(tf.zeros(self.sums[i].shape, self.sums[i].dtype))
                      for i in indices]
        with tf.control_dependencies(resets):
            return [tf.identity(g) if not isinstance(g, tf.IndexedSlices) else tf.IndexedSlices(
                tf.identity(g.values), tf.identity(g.indices), g.dense_shape) for g in grads]


class _Tracked(tf.Module):
    """The sums and the count, as a TensorFlow checkpoint finds them under the optimizer."""

    def __init__(self, sums, count):
        super().__init__(name="gradient_accumulation")
        self.sums = list(sums)
        self.count = count


class _Rows:
    """One variable's sparse gradient rows and their indices since the last sync, per replica.

    Not in TensorFlow checkpoints (their sums over the replicas would mix the rows);
    `mgpu_tf.callbacks.BackupAndRestore` saves at sync points, where they are empty.
    """

    def __init__(self, variable):
        shape = tf.TensorShape(variable.shape)
        local = dict(trainable=False, synchronization=tf.VariableSynchronization.ON_READ,
                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.dense_shape = shape
        self.indices = tf.Variable(tf.zeros([0], tf.int64), shape=[None],
                                   name="sparse_gradient_indices", **local)
        self.values = tf.Variable(tf.zeros([0] + shape[1:].as_list(), _dtype(variable)),
                                  shape=[None] + shape[1:].as_list(),
                                  name="sparse_gradient_values", **local)

    def append(self, gradient):
        values = tf.cast(gradient.values, self.values.dtype)
        self.indices.assign(tf.concat([self.indices.read_value(),
                                       tf.cast(gradient.indices, tf.int64)], 0))
        self.values.assign(tf.concat([self.values.read_value(),
                                      tf.reshape(values, [-1] + self.dense_shape[1:].as_list())],
                                     0))

    def read(self, steps):
        return tf.IndexedSlices(tf.identity(self.values.read_value()) / steps,
                                tf.identity(self.indices.read_value()),
                                tf.constant(self.dense_shape.as_list(), tf.int64))

    def clear(self):
        return tf.group(self.indices.assign(tf.zeros([0], tf.int64)),
                        self.values.assign(tf.zeros([0] + self.dense_shape[1:].as_list(),
                                                    self.values.dtype)))

    def empty(self, strategy):
        """Empties every replica's rows (outside a step)."""
        for variable in (self.indices, self.values):
            for local in strategy.experimental_local_results(variable):
                local.assign(tf.zeros([0] + local.shape[1:].as_list(), local.dtype))


def _maybe_apply(distribution, state, apply, variables):
    is_sync = tf.equal((state.count + 1) % state.steps, 0)

    def update():
        def replica_update():
            apply(state.optimizer, state.take(variables), variables)

        distribution.extended.call_for_each_replica(replica_update)
        return tf.constant(True)

    tf.cond(is_sync, update, lambda: tf.constant(False))
    state.count.assign(tf.where(is_sync, tf.constant(0, tf.int64), state.count + 1))


def _dtype(variable):
    return tf.as_dtype(getattr(variable, "dtype", "float32"))
