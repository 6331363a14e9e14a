"""Putting each stage's variables, and the optimizer's updates of them, on its device.

Design: docs/design.md#placement-of-stages
"""

import contextlib

import keras
import tensorflow as tf

from mgpu_tf.comm import optimizer_step
from mgpu_tf.compat import private

__all__ = ["place_variables", "place_optimizer", "device_of"]


def device_of(variable):
    """The canonical device of a Keras or TensorFlow variable, e.g. `/device:CPU:1`."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    spec = tf.DeviceSpec.from_string(variable.device)
    return f"/device:{spec.device_type}:{spec.device_index}"


def place_variables(layers, device):
    """Re-creates the variables of one stage's `layers` on `device`, keeping their values."""
    for layer in layers:
        for variable in getattr(layer, "weights", []):
            if device_of(variable) == device:
                continue
            with tf.device(device):
                # The new storage, made under this device scope, lives on `device`.
                private.reinitialize_variable(variable, tf.identity(variable.value))


def place_optimizer(optimizer, devices_by_variable):
    """Makes an unbuilt `optimizer` keep and update each variable's state on its device.

    `devices_by_variable` is `{id(tf.Variable): device}` for the model's variables.
    """
    record = optimizer_step.hook_of(optimizer)
    if record.placed:
        return

    def device(variable):
        storage = variable.value if isinstance(variable, keras.Variable) else variable
        name = devices_by_variable.get(id(storage))
        return tf.device(name) if name else contextlib.nullcontext()

    def placed_update_step(update_step):
        def update(gradient, variable, learning_rate):
            with device(variable):
                return update_step(gradient, variable, learning_rate)
        return update

    def placed_add_variable_from_reference(add_variable_from_reference):
        def add(reference_variable, *args, **kwargs):
            with device(reference_variable):
                return add_variable_from_reference(reference_variable, *args, **kwargs)
        return add

    # Per instance: each optimizer class has its own update_step, which no one patch reaches.
    private.wrap_optimizer_method(optimizer, "update_step", placed_update_step)
    private.wrap_optimizer_method(optimizer, "add_variable_from_reference",
                                  placed_add_variable_from_reference)
    record.placed = True
