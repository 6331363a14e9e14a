"""The `shard_optimizer_state` option: each replica keeps the slots of its 1/N slice only.

`tf.distribute` keeps a whole copy of every optimizer slot on every replica, and Keras 3's
distribution API does not run on TensorFlow; this fills that gap (ZeRO stage 1).

Design: docs/concepts.md#optimizer-state-sharded-across-replicas
"""

import functools
import warnings

import keras
import numpy as np
import tensorflow as tf

from mgpu_tf.comm import clipping
from mgpu_tf.comm import combinations
from mgpu_tf.comm import reduce_scatter
from mgpu_tf.comm import sharded_files
from mgpu_tf.comm import sparse
from mgpu_tf.comm import transport
from mgpu_tf.comm.shard_layout import Layout
from mgpu_tf.base import kind as kind_lib
from mgpu_tf.comm import optimizer_step
from mgpu_tf.compat import private

__all__ = ["ELEMENTWISE", "check_optimizer", "shard", "is_sharded",
           "slot_variables", "weights_slice"]

# Keras optimizers whose update of each number reads only that number's gradient and slots.
ELEMENTWISE = ("SGD", "Adam", "AdamW", "Adamax", "RMSprop", "Adagrad", "Adadelta", "Lion")


def check_optimizer(optimizer, strategy="mirrored"):
    """Raises `ValueError` for an optimizer whose state cannot be cut into slices.

    Args:
        optimizer: the innermost Keras optimizer (not a `LossScaleOptimizer`).
        strategy: the strategy's name, for the refusals of `comm.combinations`. Defaults
            to `"mirrored"`.
    """
    name = type(optimizer).__name__
    allowed = {getattr(keras.optimizers, n) for n in ELEMENTWISE}
    if type(optimizer) not in allowed:
        raise ValueError(
            "shard_optimizer_state needs an optimizer whose update is element-wise, so that "
            "each replica can update its slice alone; a per-variable norm (LAMB, LARS, "
            "Adafactor, Muon) or a class of its own may read the whole variable. "
            f"Received: optimizer={name}. Use one of {', '.join(ELEMENTWISE)}, or drop "
            "shard_optimizer_state.")
    combinations.refuse(strategy, shard_optimizer_state=True,
                        **combinations.optimizer_levels(optimizer))


def is_sharded(optimizer):
    """True for an optimizer `shard` made keep its state in slices."""
    return getattr(optimizer_step.find(optimizer), "sharded", None) is not None


def slot_variables(optimizer):
    """The sharded slot variables of `optimizer`, one per kind of slot (empty when unsharded).

    Each is a `keras.Variable` whose per-replica parts (`strategy.experimental_local_results`)
    hold one slice each, on that replica's device.
    """
    state = getattr(optimizer_step.find(optimizer), "sharded", None)
    return [] if state is None or not state.built else list(state.slots.values())


def weights_slice(optimizer):
    """The variable whose per-replica parts hold each replica's slice of the weights, or None.

    Each replica copies its slice of the weights there, updates it and all-gathers it.
    """
    state = getattr(optimizer_step.find(optimizer), "sharded", None)
    return None if state is None or not state.built else state.params


def shard(optimizer, strategy, *, wire_dtype=None):
    """Makes an unbuilt Keras `optimizer` keep, on each replica, the slots of its slice only.

    On each step each replica receives the sum over the replicas of its 1/N slice of the
    flattened gradients (`comm.reduce_scatter`, in compression's dtype; with compression on
    one machine, sliced from the optimizer's all-reduce), updates that slice with the optimizer's own `update_step`, and
    the slices are all-gathered into the variables (over the tcp ring with
    `transport="tcp"`). Weight decay stays the optimizer's own, on whole variables; clipping
    acts on the summed gradient (`comm.clipping`), slice by slice with the norms summed over
    them. `save_own_variables` and `load_own_variables` read and write the unsharded
    layout, so Keras files do not depend on the option or the replica count; the slots
    are listed in `optimizer.variables`, and TensorFlow checkpoints
    (`tf.train.Checkpoint(optimizer=...)`) store each kind of slot whole, as one vector of
    every variable's numbers, the same for any replica count.

    Args:
        optimizer: a Keras optimizer of `ELEMENTWISE` (the innermost, inside loss scaling).
        strategy: the `MirroredStrategy` or `MultiWorkerMirroredStrategy` it runs under.
        wire_dtype: the dtype gradients cross between workers in (compression). Defaults
            to theirs.

    Returns:
        `optimizer`.

    Raises:
        ValueError: for an optimizer `check_optimizer` refuses, or one already built.
    """
    record = optimizer_step.hook_of(optimizer)
    if record.sharded is not None:
        return optimizer
    check_optimizer(optimizer)
    if optimizer.built:
        raise ValueError(
            "shard_optimizer_state must reach the optimizer before it is built (before the "
            f"first fit or apply), or it would hold every slot whole. Received: a built "
            f"{type(optimizer).__name__}. Compile the model under strategy.scope() first.")
    state = _State(optimizer, strategy, wire_dtype)
    record.sharded = state
    # Per instance: each optimizer class has its own build, which makes whole slots.
    private.wrap_optimizer_method(optimizer, "build", lambda original: state.build)
    private.wrap_optimizer_method(optimizer, "_backend_update_step",
                                  lambda original: state.update)
    private.wrap_optimizer_method(optimizer, "save_own_variables", lambda original: state.save)
    private.wrap_optimizer_method(optimizer, "load_own_variables", lambda original: state.load)
    return optimizer


def _shadow_class(optimizer):
    """The optimizer's class, counting its steps with the optimizer's own `iterations`."""
    main = optimizer
    return type(f"Sharded{type(optimizer).__name__}", (type(optimizer),),
                {"iterations": property(lambda self: main.iterations)})


def _on_read(next_creator, **kwargs):
    # Each replica reads and writes its own part: its slice, never synchronised.
    kwargs["synchronization"] = tf.VariableSynchronization.ON_READ
    kwargs["aggregation"] = tf.VariableAggregation.SUM
    return next_creator(**kwargs)


class _State:
    """One optimizer's slices: the layout, each replica's parameter slice and slots."""

    def __init__(self, optimizer, strategy, wire_dtype=None):
        self.optimizer = optimizer
        self.strategy = strategy
        self.wire_dtype = wire_dtype
        self.built = False

    # ------------------------------------------------------------------ build

    def build(self, variables):
        """The optimizer's `build`: Keras' bookkeeping, then slots for one slice per replica."""
        optimizer = self.optimizer
        if optimizer.built:
            return
        variables = list(variables)
        dtypes = sorted({tf.as_dtype(v.dtype).name for v in variables})
        if len(dtypes) > 1:
            raise ValueError(
                "shard_optimizer_state lays every trainable variable in one vector, so they "
                f"must share one dtype. Received: dtypes {', '.join(dtypes)}. Keep the "
                "variables in one dtype (mixed precision keeps them float32).")
        private.optimizer_class_method("build")(optimizer, variables)  # no slots: Keras' base
        strategy = self.strategy
        self.dtype = tf.as_dtype(dtypes[0]) if dtypes else tf.float32
        self.layout = Layout([v.shape for v in variables], strategy.num_replicas_in_sync)
        self.reference = sharded_files.reference_order(optimizer, len(variables))
        with strategy.scope(), tf.init_scope():
            self.replica_ids = _local_replica_ids(strategy)
            self.params = keras.Variable(
                np.zeros(self.layout.slice_size, self.dtype.as_numpy_dtype), trainable=False,
                dtype=self.dtype.name, name="sharded_params", synchronization="on_read",
                aggregation="sum")
            # Its update_step alone runs: weight decay and clipping act before, as the optimizer's.
            config = dict(optimizer.get_config(), name=f"{optimizer.name}_slices")
            self.shadow = _shadow_class(optimizer).from_config(config)
            self.slots = {}

            def record_slot(add):
                def add_slot(reference, name=None, **kwargs):
                    slot = add(reference, name=name, **kwargs)
                    self.slots[name] = slot
                    return slot
                return add_slot

            private.wrap_optimizer_method(self.shadow, "add_variable_from_reference",
                                          record_slot)
            with tf.variable_creator_scope(_on_read):
                self.shadow.build([self.params])
        for name, slot in self.slots.items():
            # Whole in TensorFlow's checkpoints, and where Keras users look for slots.
            private.checkpoint_through(slot, functools.partial(self._whole_slot, name),
                                       functools.partial(self._restore_slot, name))
            private.track_optimizer_variable(optimizer, slot)
        self.built = True

    # ------------------------------------------------------------------ the step

    def update(self, grads, trainable_variables, learning_rate):
        """The optimizer's `_backend_update_step`, in replica context: the sliced update."""
        context = tf.distribute.get_replica_context()
        if context is None:
            raise ValueError(
                "An optimizer with shard_optimizer_state must apply gradients in replica "
                "context (inside strategy.run, as Keras fit does). Received: a call in "
                "cross-replica context.")
        optimizer = self.optimizer
        order = [private.variable_index(optimizer, v) for v in trainable_variables]
        if sorted(order) != list(range(len(self.layout.sizes))):
            names = sorted(v.name for v in private.optimizer_variables(optimizer)
                           if private.variable_index(optimizer, v) not in order)
            raise ValueError(
                "shard_optimizer_state needs a gradient for every trainable variable, each "
                f"replica updating a slice across them all. Received: none for {names}. "
                "Freeze those variables (trainable=False) before compiling.")
        variables = _in_order(order, trainable_variables)
        replica = tf.get_static_value(context.replica_id_in_sync_group)
        if replica is None:
            raise ValueError(
                "shard_optimizer_state needs each replica's number while the step is traced, "
                "as MirroredStrategy and MultiWorkerMirroredStrategy give it. Received: a "
                f"replica context of {type(context).__name__} without one.")
        replica, layout = int(replica), self.layout
        sparse.refuse_summed(optimizer, grads, trainable_variables)
        path = self.gradient_path()
        if path != "all_reduce":
            grads = _in_order(order, [tf.convert_to_tensor(g) for g in grads])
        if path == "to_devices":
            gradient = reduce_scatter.to_devices(context, grads, layout, self.dtype)[replica]
        elif path == "all_to_all":  # in compression's dtype, as its all-reduce sums
            slices = reduce_scatter.by_all_to_all(context, grads, layout,
                                                  tf.as_dtype(self.wire_dtype or self.dtype))
            gradient = tf.cast(slices[self.replica_ids.index(replica)], self.dtype)
        elif path == "ring":
            gradient = self._ring_reduce_scatter(grads, replica)
        else:  # summed whole by the optimizer's own all-reduce (compression)
            all_reduce = private.optimizer_class_method("_all_reduce_sum_gradients")
            summed = all_reduce(optimizer, list(zip(grads, trainable_variables)))
            grads = _in_order(order, [tf.convert_to_tensor(g) for g, _ in summed])
            gradient = layout.take(grads, replica, self.dtype)
        if path != "all_reduce" and optimizer_step.hook_of(optimizer).clips_sum:
            gradient = clipping.clip_slice(optimizer, gradient, layout, replica,
                                           self._total(context, path))
        # The weights as weight decay left them, so each slice starts where Keras' would.
        self.params.assign(layout.take(variables, replica, self.dtype))
        self.shadow.update_step(gradient, self.params, learning_rate)
        # On the replica's device: all_gather sends a tensor to where it lies.
        with tf.device(self.params.value.device):
            local = tf.identity(tf.convert_to_tensor(self.params))
        if path == "ring":
            gathered = transport.ring_all_gather(self._connection(), local, "sharded_params")
        else:
            gathered = context.all_gather(local, axis=0)
        context.merge_call(_assign, args=(variables, layout.split(gathered)))

    def gradient_path(self):
        """How each replica receives its slice's sum: `"to_devices"` (one machine),
        `"all_to_all"` (across workers), `"ring"` (the tcp ring's first half) or
        `"all_reduce"` (on one machine, compression's all-reduce, kept and sliced)."""
        if self._connection() is not None:
            return "ring"
        if kind_lib.kind_of(self.strategy).spans_processes:
            return "all_to_all"
        if optimizer_step.hook_of(self.optimizer).gradient_sum is not None:
            return "all_reduce"
        return "to_devices"

    def _total(self, context, path):
        """Sums a short 1-D tensor over the replicas, by the way the gradients' path goes."""
        if path != "ring":
            return lambda values: context.all_reduce(tf.distribute.ReduceOp.SUM, values)
        connection = self._connection()

        def total(values):
            count = int(values.shape[0])
            padding = -count % connection.ring.size  # whole chunks for each worker
            padded = tf.concat([values, tf.zeros([padding], values.dtype)], 0)
            return transport.ring_all_reduce(connection, padded, "clip_norms")[:count]

        return total

    def _connection(self):
        return kind_lib.kind_of(self.strategy).connection

    def _ring_reduce_scatter(self, grads, replica):
        """This worker's slice of the gradients summed over the tcp ring, in `wire_dtype`."""
        connection, layout = self._connection(), self.layout
        if connection.ring.rank != replica:  # both follow TF_CONFIG: chief, then workers
            raise ValueError(
                "shard_optimizer_state over transport='tcp' needs each worker's place in the "
                f"ring to be its replica number. Received: ring rank {connection.ring.rank} "
                f"for replica {replica}. Use transport='tensorflow'.")
        wire = tf.as_dtype(self.wire_dtype or self.dtype)
        flat = tf.concat([tf.reshape(tf.cast(g, wire), [-1]) for g in grads]
                         + [tf.zeros([layout.padded - layout.total], wire)], 0)
        summed = transport.ring_reduce_scatter(connection, flat, "sharded_gradients")
        return tf.cast(summed, self.dtype)

    # ------------------------------------------------------------------ checkpoints

    def _whole_slots(self):
        """`{slot name: the whole padded vector}` as numpy, gathered from every replica."""
        gather = self.strategy.gather
        return {name: np.asarray(gather(slot.value, axis=0)) for name, slot in self.slots.items()}

    def _whole_slot(self, name):
        """Slot `name` of every variable laid end to end, without padding: what a
        TensorFlow checkpoint stores, the same for any replica count."""
        whole = self.strategy.gather(self.slots[name].value, axis=0)
        return tf.reshape(whole, [-1])[:self.layout.total]

    def _restore_slot(self, name, tensor):
        """Cuts slot `name`, as `_whole_slot` gave it, into this process' slices."""
        layout = self.layout
        if tuple(tensor.shape) != (layout.total,):
            raise ValueError(
                f"A checkpoint of an optimizer with shard_optimizer_state holds each kind of "
                f"slot as one vector of all the variables' numbers ({layout.total} here). "
                f"Received: shape {tuple(tensor.shape)} for slot {name!r} of optimizer "
                f"'{self.optimizer.name}'. Restore a checkpoint written with "
                "shard_optimizer_state=True for this model, or go through model.save / "
                "model.save_weights, whose files are the same with the option or without.")
        flat = tf.concat([tf.cast(tensor, self.dtype),
                          tf.zeros([layout.padded - layout.total], self.dtype)], 0)
        size = layout.slice_size
        parts = self.strategy.experimental_local_results(self.slots[name].value)
        for part, replica in zip(parts, self.replica_ids):
            part.assign(flat[replica * size: (replica + 1) * size])

    def save(self, store):
        """The optimizer's `save_own_variables`: the layout an unsharded optimizer writes."""
        optimizer = self.optimizer
        whole = self._whole_slots() if self.built else {}
        for i, (kind, index, name) in enumerate(self.reference):
            if kind == "iterations":
                store[str(i)] = np.asarray(optimizer.iterations)
            elif kind == "learning_rate":
                store[str(i)] = np.asarray(optimizer.learning_rate)
            else:
                store[str(i)] = self.layout.split_numpy(whole[name])[index]

    def load(self, store):
        """The optimizer's `load_own_variables`: slices of the unsharded layout."""
        optimizer = self.optimizer
        if not self.built or len(store.keys()) != len(self.reference):
            warnings.warn(
                f"Skipping variable loading for optimizer '{optimizer.name}': it expects "
                f"{len(self.reference) if self.built else 0} variables, the file has "
                f"{len(store.keys())}. Build the optimizer first.", stacklevel=2)
            return
        by_slot = {}
        for i, (kind, index, name) in enumerate(self.reference):
            if kind == "iterations":
                optimizer.iterations.assign(store[str(i)])
            elif kind == "learning_rate":
                optimizer.learning_rate.assign(store[str(i)])
            else:
                by_slot.setdefault(name, {})[index] = np.asarray(store[str(i)])
        size = self.layout.slice_size
        for name, arrays in by_slot.items():
            flat = self.layout.flatten_numpy([arrays[j] for j in range(len(arrays))])
            parts = self.strategy.experimental_local_results(self.slots[name].value)
            for part, replica in zip(parts, self.replica_ids):
                part.assign(flat[replica * size: (replica + 1) * size])


def _in_order(order, items):
    """`items`, the k-th of which belongs at `order[k]`, in the optimizer's order."""
    out = [None] * len(order)
    for index, item in zip(order, items):
        out[index] = item
    return out


def _assign(distribution, variables, values):
    """Writes each variable's gathered value into its copy on every device."""
    for variable, value in zip(variables, values):
        storage = variable.value if isinstance(variable, keras.Variable) else variable
        distribution.extended.update(
            storage, lambda v, x: v.assign(tf.cast(x, v.dtype)), args=(value,), group=False)


def _local_replica_ids(strategy):
    """The replica number of each of this process' replicas, in their local order."""
    ids = strategy.run(lambda: tf.distribute.get_replica_context().replica_id_in_sync_group)
    return [int(i) for i in strategy.experimental_local_results(ids)]
