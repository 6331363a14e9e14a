"""Placement: each stage's variables, forward ops, gradient ops and updates on its device.

Checked in the graph of a traced train step (the ops' requested devices), the
graph TensorFlow's placer starts from.
"""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from support import models

DEVICES = ["/device:CPU:1", "/device:CPU:2"]
STAGE_LAYERS = [("dense_0", "dense_1"), ("dense_2", "dense_3")]
MICROBATCHES = 2
COMPUTE = ("MatMul", "BiasAdd", "BiasAddGrad", "Tanh", "TanhGrad")


def _canonical(device):
    spec = tf.DeviceSpec.from_string(device)
    return f"/device:{spec.device_type}:{spec.device_index}"


@pytest.fixture(scope="module", params=["never", "always"])
def traced(request):
    model = mgpu_tf.ModelParallel(models.mlp(), DEVICES, balance=[2, 2], microbatches=MICROBATCHES,
                                  recompute=request.param)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    x, y = np.ones((8, 8), "float32"), np.ones((8, 1), "float32")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)  # builds the optimizer
    function = tf.function(model.train_step).get_concrete_function(
        (tf.TensorSpec([8, 8]), tf.TensorSpec([8, 1])))
    resources = {internal.name: _canonical(external.device)
                 for external, internal in function.graph.captures
                 if external.dtype == tf.resource}
    return model, function.graph, resources


def _stage_of(op_name):
    """The stage whose layer's name scope the op is in (forward or gradient), if any."""
    for stage, layers in enumerate(STAGE_LAYERS):
        if any(segment.startswith(layers) for segment in op_name.split("/")):
            return stage
    return None


def test_variables_live_on_their_stage_device(traced):
    model, _, _ = traced
    for stage, layers in enumerate(STAGE_LAYERS):
        for name in layers:
            for variable in model.model.get_layer(name).weights:
                assert _canonical(variable.value.device) == DEVICES[stage], variable.path


def test_optimizer_slots_live_with_their_variable(traced):
    model, _, _ = traced
    for stage, layers in enumerate(STAGE_LAYERS):
        for name in layers:
            for slot in model.optimizer.variables:
                if f"_{name}_" in slot.path:
                    assert _canonical(slot.value.device) == DEVICES[stage], slot.path


def test_every_forward_and_gradient_op_runs_on_its_stage_device(traced):
    model, graph, resources = traced
    checked = collections.Counter()
    for op in graph.get_operations():
        stage = _stage_of(op.name)
        if stage is None:
            assert op.type not in COMPUTE, f"{op.name} belongs to no stage"
            continue
        if op.type == "Placeholder":  # a captured variable handle
            device = resources[op.outputs[0].name]
        elif op.type == "ReadVariableOp":  # runs where its variable lives
            device = resources[op.inputs[0].name]
        else:
            device = op.device
        assert device == DEVICES[stage], f"{op.type} {op.name} on {device!r}"
        checked[stage, op.type, "gradient_tape" in op.name] += 1
    # Per Dense layer and micro-batch: one forward MatMul (two when recomputed), two
    # gradient MatMuls.
    forward = 2 if model.recompute == "always" else 1
    for stage in range(2):
        assert checked[stage, "MatMul", False] == 2 * MICROBATCHES * forward
        assert checked[stage, "MatMul", True] >= 2 * 2 * MICROBATCHES


def test_gradients_are_summed_on_their_stage_device(traced):
    _, graph, _ = traced
    sums = [op for op in graph.get_operations() if op.type == "AddN"]
    assert sorted(op.device for op in sums) == sorted(DEVICES * 4)  # 4 variables a stage


def test_optimizer_updates_each_variable_on_its_device(traced):
    _, graph, resources = traced
    updates = [op for op in graph.get_operations()
               if op.type in ("AssignSubVariableOp", "AssignVariableOp", "AssignAddVariableOp")
               and op.name.startswith("adam")]
    assert len(updates) == 8 * 3  # each variable and its two slots
    for op in updates:
        assert op.device == resources[op.inputs[0].name], op.name
    assert {op.device for op in updates} == set(DEVICES)
    arithmetic = [op for op in graph.get_operations() if op.name.startswith("adam")
                  and op.type not in ("ReadVariableOp", "Placeholder", "Identity", "IdentityN",
                                      "Const", "NoOp")]
    assert arithmetic and all(op.device in DEVICES for op in arithmetic)


def test_upstream_tape_still_leaves_gradients_unplaced():
    """tensorflow/tensorflow#33688, which `pipeline` works around; fails once it is fixed."""
    model = models.mlp((4, 1))
    variables = model.trainable_variables

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            with tf.device(DEVICES[0]):
                h = model.get_layer("dense_0")(x)
            with tf.device(DEVICES[1]):
                y = model.get_layer("dense_1")(h)
        return tape.gradient(y, variables)

    graph = step.get_concrete_function(tf.TensorSpec([2, 8])).graph
    gradient_matmuls = [op for op in graph.get_operations()
                        if op.type == "MatMul" and "gradient_tape" in op.name]
    assert gradient_matmuls and all(op.device == "" for op in gradient_matmuls)


def test_a_keras_without_the_private_hook_gets_a_clear_error(monkeypatch):
    from mgpu_tf.model_parallel import placement

    layer = keras.layers.Dense(2)
    with tf.device("/device:CPU:0"):
        layer.build((None, 3))
    monkeypatch.setattr(type(layer.kernel), "_initialize", None)
    with pytest.raises(RuntimeError, match=r"through Keras' private `Variable._initialize`, "
                                           r"which Keras \S+ does not have"):
        placement.place_variables([layer], "/device:CPU:1")
