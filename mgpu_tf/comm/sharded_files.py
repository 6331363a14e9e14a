"""The sharded slots in Keras files: whole, per variable, in the order an unsharded
optimizer keeps them (`reference_order`), so a file loads sharded or not, on any count.

Design: docs/concepts.md#optimizer-state-sharded-across-replicas
"""

import functools
import warnings

import keras
import numpy as np
import tensorflow as tf

from mgpu_tf.comm import optimizer_step
from mgpu_tf.compat import private

__all__ = ["reference_order", "save_whole_inside"]


def save_whole_inside(outer, optimizer):
    """Makes the Keras files of `outer` (a `LossScaleOptimizer` around the sharded
    `optimizer`) hold the inner slots in the unsharded layout, as `optimizer`'s own do.

    Keras' `save_own_variables` of a wrapper writes `outer.variables`, its own and the inner
    optimizer's, each as `numpy()` reads it: of a sliced slot, the sum of the slices.

    Args:
        outer: the optimizer `optimizer` is inside.
        optimizer: an optimizer `shard` was given.
    """
    state = optimizer_step.find(optimizer).sharded

    def own(wrapper):
        inner = {id(v) for v in optimizer.variables}
        return [v for v in wrapper.variables if id(v) not in inner]

    def save(original, store):
        if not state.built:  # no slots yet: what Keras writes
            return original(store)
        variables = own(outer)
        for i, variable in enumerate(variables):
            store[str(i)] = variable.numpy()
        inner = {}
        state.save(inner)
        for j in range(len(inner)):
            store[str(len(variables) + j)] = inner[str(j)]

    def load(store):
        variables = own(outer)
        expected = len(variables) + (len(state.reference) if state.built else 0)
        if state.built and len(store.keys()) == len(variables) + 2:
            # Written when the slots were not in optimizer.variables: its own, then the
            # inner iterations and learning rate; the inner optimizer's entry holds the rest.
            for i, variable in enumerate(variables):
                variable.assign(store[str(i)])
            return
        if not state.built or len(store.keys()) != expected:
            warnings.warn(
                f"Skipping variable loading for optimizer '{outer.name}': it expects "
                f"{expected} variables, the file has {len(store.keys())}. Build the "
                "optimizer first.", stacklevel=2)
            return
        for i, variable in enumerate(variables):
            variable.assign(store[str(i)])
        state.load({str(j): store[str(len(variables) + j)]
                    for j in range(len(state.reference))})

    private.wrap_optimizer_method(outer, "save_own_variables",
                                  lambda original: functools.partial(save, original))
    private.wrap_optimizer_method(outer, "load_own_variables", lambda original: load)


def reference_order(optimizer, count):
    """What an unsharded `optimizer` built on `count` variables keeps, in its order.

    Each entry is `(kind, variable index, slot name)`, kind one of `"iterations"`,
    `"learning_rate"` and `"slot"`; learned from a copy built on stand-ins in a graph of
    its own, which no strategy reaches.
    """
    made = {}

    def record_slot(add):
        def add_slot(reference, name=None, **kwargs):
            slot = add(reference, name=name, **kwargs)
            made[id(slot)] = (next(i for i, s in enumerate(stand_ins) if s is reference), name)
            return slot
        return add_slot

    config = optimizer.get_config()
    with tf.Graph().as_default():
        stand_ins = [keras.Variable(np.zeros(1, "float32"), name=f"stand_in_{i}")
                     for i in range(count)]
        copy = type(optimizer).from_config(config)
        private.wrap_optimizer_method(copy, "add_variable_from_reference", record_slot)
        copy.build(stand_ins)
        order = []
        for variable in copy.variables:
            if variable is copy.iterations:
                order.append(("iterations", None, None))
            elif variable is copy.learning_rate:
                order.append(("learning_rate", None, None))
            elif id(variable) in made:
                order.append(("slot", *made[id(variable)]))
            else:
                raise ValueError(
                    "shard_optimizer_state shards only slots made for each variable. "
                    f"Received: {type(optimizer).__name__} also keeps {variable.name!r}. "
                    "Drop shard_optimizer_state for this optimizer.")
    return order
