"""Tests for mgpu_tf.compat.private, private_trainer and private_callbacks: each private name.

Each accessor is run on the installed Keras and TensorFlow and its result checked, so
that a renamed or changed private name fails here, by name, rather than in a training
step. Each also gives `PrivateNameError` (not `AttributeError`) on an object without
the name, and logs once on a release outside the ones its name is known for. A scan
of the package's source (and the benchmarks') fails when a module other than the
accessors' reaches a private name itself, `mgpu_tf/compat/`'s other modules included,
or a class reads upstream private state that it inherits from a Keras or TensorFlow
class through classes of other modules.
"""

import ast
import importlib
import inspect
import json
import logging
import pathlib
import re
import shutil
import sys
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.compat import (private, private_callbacks, private_collectives, private_graph,
                            private_runtime, private_trainer, versions)
from mgpu_tf.compat.private import PrivateNameError
from support import workers

PACKAGE = pathlib.Path(mgpu_tf.__file__).resolve().parent


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    """Lets each test see the once-per-name warning afresh."""
    monkeypatch.setattr(versions, "_warned", set())


def _missing(name, received):
    """The start of the error for the private `name`, gone, with what was received."""
    known = versions.KNOWN[name]
    owner = "Keras'" if known.library == "keras" else "TensorFlow's"
    return re.escape(f"{known.purpose} through {owner} private `{name}`, which ") + (
        r".* does not have \(" + re.escape(known.text()) + r" do\)\. Received: "
        + re.escape(received) + re.escape(f". Install a release it is known for: "
                                          f"pip install '{known.pin()}'."))


def _sequential():
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="a"),
                             keras.layers.Dense(2, name="b")], name="seq")


def _functional():
    x = keras.Input((3,))
    h = keras.layers.Dense(4, name="a")(x)
    return keras.Model(x, keras.layers.Dense(2, name="b")(h), name="fun")


class _Subclassed(keras.Model):
    def __init__(self):
        super().__init__(name="sub")
        self.dense = keras.layers.Dense(2)

    def call(self, x):
        return self.dense(x)


def _bare(name="thing"):
    """An object with a name and none of the private names."""
    return types.SimpleNamespace(name=name)


# ------------------------------------------------------------------ the version table

# Names whose accessor uses them only on the releases they are known for, and does without
# them on the older ones (Keras 3.8-3.11 have no `_autoconvert_optionals`).
RELEASE_CHOSEN = {"TensorFlowTrainer._autoconvert_optionals"}


@pytest.mark.parametrize("name, version, known", [
    # The releases the release matrix runs: Keras 3.8-3.16, TensorFlow 2.18-2.22.
    ("Sequential._functional", "3.7.0", False),
    ("Sequential._functional", "3.8.0", True),
    ("Sequential._functional", "3.15.1", True),
    ("Sequential._functional", "3.16.0.dev2026102704", True),
    ("Sequential._functional", "3.17.0", False),
    ("Sequential._functional", "2.15.0", False),
    ("TFOptimizer._all_reduce_sum_gradients", "3.8.0", True),
    ("TensorFlowTrainer._maybe_symbolic_build", "3.10.0", True),
    ("Trainer._initial_epoch", "3.0.5", False),
    ("Trainer._initial_epoch", "3.17.0", False),
    ("DatasetV2._inputs", "2.17.1", False),
    ("DatasetV2._inputs", "2.18.1", True),
    ("DatasetV2._inputs", "2.22.0rc0", True),
    ("DatasetV2._inputs", "2.23.0", False),
    ("keras.src.losses.loss.unscale_loss_for_distribution", "3.7.0", False),
    ("keras.src.losses.loss.unscale_loss_for_distribution", "3.8.0", True),
    ("TensorFlowTrainer._make_function", "3.8.0", True),
    ("keras.src.trainers.data_adapters.is_tf_dataset", "3.8.0", True),
    ("TensorFlowTrainer._autoconvert_optionals", "3.11.3", False),
    ("TensorFlowTrainer._autoconvert_optionals", "3.12.0", True),
])
def test_known_for(name, version, known):
    assert versions.known_for(name, version) is known


def test_known_for_rejects_unknown_names_and_versions():
    with pytest.raises(ValueError, match="`name` must be one of "):
        versions.known_for("Layer._no_such_name")
    with pytest.raises(ValueError, match="`version` must start with major.minor"):
        versions.known_for("Sequential._functional", "three")


def test_the_installed_releases_are_known():
    unknown = sorted(name for name in versions.KNOWN
                     if not versions.known_for(name) and name not in RELEASE_CHOSEN)
    assert not unknown, (
        f"Keras {keras.__version__} / TensorFlow {tf.__version__} is outside the releases "
        f"these private names are known for: {unknown}. Run this file: when every accessor "
        "test passes, widen the ranges in mgpu_tf/compat/versions.py.")


def test_each_accessor_docstring_states_the_known_ranges():
    ranges = {known.text() for known in versions.KNOWN.values()}
    source = "".join(inspect.getsource(m) for m in (private, private_callbacks, private_trainer,
                                                   private_collectives, private_graph))
    written = set(re.findall(r"\((?:Keras|TensorFlow) \d+\.\d+-\d+\.\d+\)", source))
    assert {f"({r})" for r in ranges} == written


def test_a_release_outside_the_range_logs_once_and_tries(monkeypatch, caplog):
    monkeypatch.setattr(keras, "__version__", "3.17.0")
    model = _sequential()
    with caplog.at_level(logging.WARNING, logger="mgpu_tf"):
        first = private.sequential_graph(model)
        second = private.sequential_graph(model)
        # Another private name of the same release: no second line.
        private.nested_layers(model)
        private_trainer.loss_tracker(model)
    assert first is second is not None
    [record] = caplog.records
    assert record.getMessage() == (
        "mgpu_tf: Keras 3.17.0 is outside the releases mgpu_tf is tested with (Keras 3.8-3.16), "
        "so the private Keras names it uses are tried untested (docs/compatibility.md).")


def test_a_tensorflow_outside_the_range_logs_once_and_tries(monkeypatch, caplog):
    monkeypatch.setattr(tf, "__version__", "2.23.0")
    with caplog.at_level(logging.WARNING, logger="mgpu_tf"):
        inputs = private.dataset_inputs(tf.data.Dataset.range(4).batch(2))
        private.dataset_inputs(tf.data.Dataset.range(4).batch(2))
        private.set_optional_spec(tf.experimental.Optional.empty(None),
                                  tf.TensorSpec([], tf.int32))
    assert len(inputs) == 1
    [record] = caplog.records
    assert record.getMessage() == (
        "mgpu_tf: TensorFlow 2.23.0 is outside the releases mgpu_tf is tested with "
        "(TensorFlow 2.18-2.22), so the private TensorFlow names it uses are tried untested "
        "(docs/compatibility.md).")


def test_a_release_without_the_name_says_what_to_install(monkeypatch):
    monkeypatch.setattr(keras, "__version__", "3.16.0")
    with pytest.raises(PrivateNameError, match=_missing(
            "Sequential._functional", "model=<SimpleNamespace 'm'>")) as error:
        private.sequential_graph(_bare("m"))
    assert "Keras 3.16.0 does not have" in str(error.value)
    assert not isinstance(error.value, AttributeError)


def test_require_checks_every_name_before_a_step():
    optimizer = keras.optimizers.SGD()
    private.require(optimizer, "BaseOptimizer._trainable_variables",
                    "BaseOptimizer._get_variable_index", argument="optimizer")
    with pytest.raises(PrivateNameError, match=_missing(
            "BaseOptimizer._get_variable_index", "optimizer=<SimpleNamespace 'sgd'>")):
        private.require(_bare("sgd"), "BaseOptimizer._get_variable_index",
                        argument="optimizer")


# ------------------------------------------------------------------ models and layers


def test_sequential_graph():
    model = _sequential()
    graph = private.sequential_graph(model)
    assert private.is_functional(graph)
    assert [layer.name for layer in graph.layers[-2:]] == ["a", "b"]
    x = np.ones((2, 3), "float32")
    np.testing.assert_allclose(graph(x), model(x))
    assert private.sequential_graph(keras.Sequential([keras.layers.Dense(2)])) is None


def test_is_functional():
    assert private.is_functional(_functional())
    assert not private.is_functional(_sequential())
    assert not private.is_functional(_Subclassed())


def test_functional_nodes_are_the_layers_in_order():
    model = _functional()
    nodes = private.functional_nodes(model)
    assert [node.operation.name for node in nodes] == ["a", "b"]
    # What mgpu_tf.model_parallel.partition reads from each node.
    assert nodes[0].arguments.keras_tensors == [model.inputs[0]]
    assert nodes[1].arguments.keras_tensors == nodes[0].outputs
    assert nodes[1].outputs == [model.outputs[0]]


def test_nested_layers_include_nested_models():
    inner = keras.Sequential([keras.Input((3,)), keras.layers.BatchNormalization(name="bn")],
                             name="inner")
    outer = keras.Sequential([keras.Input((3,)), inner, keras.layers.Dense(1, name="d")])
    names = [layer.name for layer in private.nested_layers(outer)]
    assert {"inner", "bn", "d"} <= set(names) and outer.name not in names


def test_call_has_training_arg_reads_the_call_signature():
    class WithTraining(keras.layers.Layer):
        def call(self, x, training=None):
            return x

    class Plain(keras.layers.Layer):
        def call(self, x):
            return x

    assert private.call_has_training_arg(WithTraining()) is True
    assert private.call_has_training_arg(Plain()) is False


def test_reinitialize_variable_moves_it_and_keeps_its_value():
    layer = keras.layers.Dense(2)
    with tf.device("/device:CPU:0"):
        layer.build((None, 3))
    kernel = layer.kernel
    before = kernel.numpy()
    with tf.device("/device:CPU:1"):
        private.reinitialize_variable(kernel, tf.identity(kernel.value))
    assert layer.kernel is kernel
    assert tf.DeviceSpec.from_string(kernel.value.device).device_index == 1
    np.testing.assert_array_equal(kernel.numpy(), before)
    x = np.ones((1, 3), "float32")
    np.testing.assert_allclose(layer(x), x @ before + layer.bias.numpy(), rtol=1e-6)


@pytest.mark.parametrize("call, name, received", [
    (lambda o: private.sequential_graph(o), "Sequential._functional",
     "model=<SimpleNamespace 'thing'>"),
    (lambda o: private.functional_nodes(o), "Functional._nodes_by_depth",
     "model=<SimpleNamespace 'thing'>"),
    (lambda o: private.nested_layers(o), "Layer._flatten_layers",
     "layer=<SimpleNamespace 'thing'>"),
    (lambda o: private.reinitialize_variable(o, 0.0), "Variable._initialize",
     "variable=<SimpleNamespace 'thing'>"),
    (lambda o: private.optimizer_variables(o), "BaseOptimizer._trainable_variables",
     "optimizer=<SimpleNamespace 'thing'>"),
    (lambda o: private.variable_index(o, None), "BaseOptimizer._get_variable_index",
     "optimizer=<SimpleNamespace 'thing'>"),
    (lambda o: private.track_optimizer_variable(o, None), "BaseOptimizer._track_variable",
     "optimizer=<SimpleNamespace 'thing'>"),
    (lambda o: private.checkpoint_through(o, None, None), "Trackable._serialize_to_tensors",
     "variable=<SimpleNamespace 'thing'>"),
    (lambda o: private_trainer.model_strategy(o), "Trainer._distribute_strategy",
     "model=<SimpleNamespace 'thing'>"),
    (lambda o: private.dataset_inputs(o), "DatasetV2._inputs",
     "dataset=<SimpleNamespace 'thing'>"),
    (lambda o: private_callbacks.set_initial_epoch(o, 2), "Trainer._initial_epoch",
     "model=<SimpleNamespace 'thing'>"),
    (lambda o: private.call_has_training_arg(o), "Layer._call_has_training_arg",
     "layer=<SimpleNamespace 'thing'>"),
    (lambda o: private.set_optional_spec(o, None), "Optional._element_spec",
     "optional=<SimpleNamespace 'thing'>"),
    (lambda o: private_trainer.loss_tracker(o), "Trainer._loss_tracker",
     "model=<SimpleNamespace 'thing'>"),
    (lambda o: private_trainer.compute_loss(o, None, None, None, None, True),
     "Trainer._compute_loss", "model=<SimpleNamespace 'thing'>"),
    (lambda o: private_trainer.autoconvert_optionals(o, None),
     "TensorFlowTrainer._autoconvert_optionals", "model=<SimpleNamespace 'thing'>"),
])
def test_an_object_without_the_name_gets_the_clear_error(call, name, received):
    if name in RELEASE_CHOSEN and not versions.known_for(name):
        pytest.skip(f"Keras {keras.__version__} does not use {name}")
    with pytest.raises(PrivateNameError, match=_missing(name, received)):
        call(_bare())


def test_tensorflow_checkpoints_save_and_restore_through_the_given_functions(tmp_path):
    variable = keras.Variable(np.zeros(2, "float32"), name="stored")
    restored = []
    private.checkpoint_through(variable, lambda: tf.constant([1.0, 2.0, 3.0]),
                               restored.append)
    path = tf.train.Checkpoint(v=variable).save(str(tmp_path / "ckpt"))
    assert dict(tf.train.list_variables(path))["v/.ATTRIBUTES/VARIABLE_VALUE"] == [3]
    tf.train.Checkpoint(v=variable).restore(path)
    assert [list(np.asarray(t)) for t in restored] == [[1.0, 2.0, 3.0]]


def test_a_tracked_optimizer_variable_is_listed_in_its_variables():
    optimizer = keras.optimizers.SGD()
    optimizer.build([keras.Variable(np.zeros(2, "float32"))])
    extra = keras.Variable(np.zeros(3, "float32"), name="extra")
    private.track_optimizer_variable(optimizer, extra)
    assert optimizer.variables[-1] is extra


def test_a_name_that_is_no_longer_a_method_gets_the_clear_error(monkeypatch):
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    monkeypatch.setattr(type(layer.kernel), "_initialize", None)
    with pytest.raises(PrivateNameError, match=_missing(
            "Variable._initialize", "variable=<Variable 'kernel'>")):
        private.reinitialize_variable(layer.kernel, tf.zeros((3, 2)))


def test_a_keras_without_the_functional_class_gets_the_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "keras.src.models.functional", None)
    with pytest.raises(PrivateNameError, match=_missing(
            "keras.src.models.functional.Functional", "model=<Sequential 'seq'>")):
        private.is_functional(_sequential())


# ------------------------------------------------------------------ optimizers


def test_optimizer_variables_and_their_index():
    first, second = keras.Variable(np.zeros(2)), keras.Variable(np.zeros(3))
    optimizer = keras.optimizers.SGD()
    assert private.optimizer_variables(optimizer) == []
    optimizer.build([first, second])
    built = private.optimizer_variables(optimizer)
    assert len(built) == 2 and built[0] is first and built[1] is second
    assert private.variable_index(optimizer, second) == 1
    assert private.variable_index(optimizer, first) == 0


def _recording(calls, name):
    def wrap(original):
        def method(*args, **kwargs):
            calls.append(name)
            return original(*args, **kwargs)
        return method
    return wrap


@pytest.mark.parametrize("name", ["build", "apply", "update_step",
                                  "add_variable_from_reference", "_all_reduce_sum_gradients",
                                  "_backend_update_step", "_clip_gradients"])
def test_keras_calls_the_wrapped_method_of_the_instance(name):
    variable = keras.Variable(np.ones(2, "float32"))
    optimizer = keras.optimizers.SGD(learning_rate=0.5, momentum=0.9)
    calls = []
    replacement = private.wrap_optimizer_method(optimizer, name, _recording(calls, name))
    assert getattr(optimizer, name) is replacement
    optimizer.apply_gradients([(tf.ones(2), variable)])
    assert name in calls, f"Keras {keras.__version__} no longer calls optimizer.{name}"
    np.testing.assert_allclose(variable.numpy(), [0.5, 0.5])


def test_all_reduce_sum_gradients_sums_over_replicas():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        variable = keras.Variable(np.zeros(1, "float32"))
        optimizer = keras.optimizers.SGD(learning_rate=1.0)
        optimizer.build([variable])
    sums = []

    def wrap(original):
        def all_reduce(grads_and_vars):
            out = original(grads_and_vars)
            sums.append(out[0][0])
            return out
        return all_reduce

    private.wrap_optimizer_method(optimizer, "_all_reduce_sum_gradients", wrap)

    _apply_replica_numbers(strategy, optimizer, variable)
    assert sums, "Keras did not call _all_reduce_sum_gradients under MirroredStrategy"
    np.testing.assert_allclose(variable.numpy(), [-3.0])  # 0 - (1 + 2)


def test_keras_clips_each_replicas_gradient_before_the_sum():
    # Why comm.clipping holds Keras' clip back under a strategy: when this fails, Keras
    # clips the sum itself.
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        variable = keras.Variable(np.zeros(1, "float32"))
        optimizer = keras.optimizers.SGD(learning_rate=1.0, clipvalue=1.5)
        optimizer.build([variable])

    _apply_replica_numbers(strategy, optimizer, variable)
    np.testing.assert_allclose(variable.numpy(), [-2.5])  # 1 + min(2, 1.5); the sum's: -1.5


def test_layer_build_method_is_what_a_first_call_runs(monkeypatch):
    calls = []
    original = private.layer_build_method()
    monkeypatch.setattr(keras.layers.Layer, "_maybe_build", original)
    private.set_layer_build_method(lambda layer, call_spec: calls.append(layer.name)
                                   or original(layer, call_spec))
    keras.layers.Dense(2, name="first_call")(np.ones((1, 3), "float32"))
    assert calls == ["first_call"]


def test_optimizer_type_method_is_keras_own_unless_the_class_has_one():
    class OwnClip(keras.optimizers.SGD):
        def _clip_gradients(self, grads):
            return grads

    keras_clip = private.optimizer_class_method("_clip_gradients")
    assert private.optimizer_type_method(keras.optimizers.SGD(), "_clip_gradients") is keras_clip
    assert private.optimizer_type_method(OwnClip(), "_clip_gradients") is not keras_clip
    with pytest.raises(ValueError, match="`name` must be one of build"):
        private.optimizer_type_method(keras.optimizers.SGD(), "_apply_weight_decay")


def test_wrap_optimizer_method_refuses_other_names():
    with pytest.raises(ValueError, match="`name` must be one of build, apply, update_step"):
        private.wrap_optimizer_method(keras.optimizers.SGD(), "_apply_weight_decay",
                                      lambda original: original)


@pytest.mark.parametrize("name, owner", [("update_step", "BaseOptimizer"),
                                         ("_all_reduce_sum_gradients", "TFOptimizer"),
                                         ("_clip_gradients", "BaseOptimizer")])
def test_an_optimizer_without_the_method_gets_the_clear_error(name, owner):
    with pytest.raises(PrivateNameError, match=_missing(
            f"{owner}.{name}", "optimizer=<SimpleNamespace 'opt'>")):
        private.wrap_optimizer_method(_bare("opt"), name, lambda original: original)


# ------------------------------------------------------------------ Keras' TensorFlow trainer


def test_keras_trainer_and_its_functions():
    trainer = private_trainer.keras_trainer()
    tensorflow_trainer, base = private_trainer.trainer_classes()
    assert tensorflow_trainer.__module__ == trainer.__name__
    assert base.__module__ == "keras.src.trainers.trainer"
    assert private_trainer.trainer_function("reduce_per_replica") is trainer.reduce_per_replica
    assert (private_trainer.trainer_function("TensorFlowTrainer._maybe_symbolic_build")
            is tensorflow_trainer._maybe_symbolic_build)
    assert str(inspect.signature(inspect.unwrap(
        private_trainer.trainer_function("_collective_all_reduce_multi_worker")))) == "(strategy)"


@pytest.mark.parametrize("name, signature", [
    ("_make_function", "(self, step_function)"),
    ("make_train_function", "(self, force=False)"),
    ("make_test_function", "(self, force=False)"),
    ("train_step", "(self, data)"),
    ("test_step", "(self, data)"),
])
def test_the_trainer_methods_of_the_step_fix(name, signature):
    found = private_trainer.trainer_function(f"TensorFlowTrainer.{name}")
    assert found is getattr(keras.Model, name)  # what every Keras model runs
    assert str(inspect.signature(inspect.unwrap(found))) == signature


def test_fit_makes_its_train_function_with_the_one_set(monkeypatch):
    cls = private_trainer.trainer_classes()[0]
    original = cls.make_train_function
    monkeypatch.setattr(cls, "make_train_function", original)  # put back afterwards
    made = []

    def make_train_function(self, force=False):
        made.append(self.name)
        return original(self, force)

    private_trainer.set_trainer_function("TensorFlowTrainer.make_train_function",
                                         make_train_function)
    model = _sequential()
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((4, 3)), np.ones((4, 2)), batch_size=2, epochs=1, verbose=0)
    assert made == ["seq"], f"Keras {keras.__version__} no longer asks the model for it"


def test_is_multi_worker_is_false_on_one_machine():
    assert private_trainer.is_multi_worker(mgpu_tf.make_strategy("mirrored", devices=2)) is False
    assert private_trainer.is_multi_worker(tf.distribute.get_strategy()) is False


def test_set_trainer_function_is_what_keras_runs(monkeypatch):
    trainer = private_trainer.keras_trainer()
    monkeypatch.setattr(trainer, "reduce_per_replica", trainer.reduce_per_replica)
    seen = []
    original = trainer.reduce_per_replica

    def reduce_per_replica(values, strategy, reduction):
        seen.append(reduction)
        return original(values, strategy, reduction)

    private_trainer.set_trainer_function("reduce_per_replica", reduce_per_replica)
    model = _sequential()
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((4, 3)), np.ones((4, 2)), batch_size=2, epochs=1, verbose=0)
    assert seen, "Keras' train step no longer calls reduce_per_replica by its module name"


def test_trainer_function_refuses_other_names():
    with pytest.raises(ValueError, match="`name` must be one of "):
        private_trainer.trainer_function("TensorFlowTrainer.evaluate")


@pytest.mark.parametrize("name", ["TensorFlowTrainer.train_step", "Trainer.compile"])
def test_a_trainer_module_without_its_class_gets_the_clear_error(monkeypatch, name):
    # A Keras whose trainer class has another name than its release's: the error names what
    # the toolkit needs.
    trainer = private_trainer.keras_trainer()
    class_name = versions.trainer_class_name(keras.__version__)
    monkeypatch.delattr(trainer, class_name)
    with pytest.raises(PrivateNameError, match=_missing(
            name, f"{trainer.__name__} without a class {class_name}")):
        private_trainer.trainer_function(name)


@pytest.mark.parametrize("version, name", [
    ("3.8.0", "TensorFlowTrainer"), ("3.15.1", "TensorFlowTrainer"),
    ("3.16.0.dev2026102704", "Trainer"), ("3.16.0", "Trainer"), ("3.17.0", "Trainer"),
    ("3.7.0", "TensorFlowTrainer")])
def test_the_trainer_class_is_chosen_by_release(version, name):
    assert versions.trainer_class_name(version) == name


def test_the_trainer_class_is_the_one_keras_models_run():
    tensorflow_trainer, base = private_trainer.trainer_classes()
    ancestors = type(_sequential()).__mro__
    assert ancestors.index(tensorflow_trainer) + 1 == ancestors.index(base)
    assert tensorflow_trainer.__module__ == "keras.src.backend.tensorflow.trainer"
    assert base.__module__ == "keras.src.trainers.trainer"
    # Keras' own names for its classes, by release.
    expected = ("Trainer", "BaseTrainer") if versions.release_in(
        keras.__version__, (3, 16), (99, 0)) else ("TensorFlowTrainer", "Trainer")
    assert (tensorflow_trainer.__name__, base.__name__) == expected


def test_a_trainer_without_the_function_gets_the_clear_error(monkeypatch):
    trainer = private_trainer.keras_trainer()
    monkeypatch.delattr(trainer, "_collective_all_reduce_multi_worker")
    with pytest.raises(PrivateNameError, match=_missing(
            "trainer._collective_all_reduce_multi_worker", "the Keras installation")):
        private_trainer.is_multi_worker(tf.distribute.get_strategy())


def test_a_keras_without_the_trainer_module_gets_the_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "keras.src.backend.tensorflow.trainer", None)
    with pytest.raises(PrivateNameError, match=_missing(
            "keras.src.backend.tensorflow.trainer", "the Keras installation")):
        private_trainer.keras_trainer()


def test_model_strategy_is_the_scope_it_was_made_in():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        inside = _sequential()
    assert private_trainer.model_strategy(inside) is strategy
    assert private_trainer.model_strategy(_sequential()) is None


# ------------------------------------------------------------------ the train step


def test_autoconvert_optionals_gives_none_for_an_empty_optional():
    step = private_trainer.autoconvert_optionals(_sequential(), lambda data: data)
    empty = tf.experimental.Optional.empty(None)
    x, weight = step((tf.ones(2), empty))
    # Keras 3.12 on convert an empty optional in a batch; 3.8-3.11 hand the batch as it is.
    if versions.release_in(keras.__version__, (3, 0), (3, 11)):
        assert weight is empty
    else:
        assert weight is None
    np.testing.assert_array_equal(x, [1.0, 1.0])


def test_the_loss_tracker_is_what_keras_logs_as_loss():
    model = _sequential()
    model.compile(optimizer="sgd", loss="mse")
    tracker = private_trainer.loss_tracker(model)
    assert isinstance(tracker, keras.metrics.Mean)
    tracker.update_state(3.0)
    tracker.update_state(5.0, sample_weight=3.0)
    assert float(model.get_metrics_result()["loss"]) == 4.5  # (3 + 15) / 4


def test_compute_loss_passes_training_only_to_a_compute_loss_that_takes_it():
    x, y = np.ones((2, 3), "float32"), np.zeros((2, 2), "float32")
    y_pred = np.array([[1.0, 2.0], [3.0, 4.0]], "float32")
    model = _sequential()
    model.compile(optimizer="sgd", loss="mse")
    loss = private_trainer.compute_loss(model, x, y, y_pred, None, True)
    assert float(loss) == pytest.approx(7.5)  # the mean of 1, 4, 9, 16

    class Older(keras.Sequential):  # compute_loss as written before Keras 3.4
        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None):
            return super().compute_loss(x, y, y_pred, sample_weight) * 2

    older = Older([keras.Input((3,)), keras.layers.Dense(2)])
    older.compile(optimizer="sgd", loss="mse")
    assert float(private_trainer.compute_loss(older, x, y, y_pred, None, True)) == (
        pytest.approx(15.0))


def test_unscale_loss_undoes_what_keras_losses_divide_by_under_a_strategy():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    y, y_pred = tf.zeros((2, 1)), tf.constant([[1.0], [3.0]])

    def replica():
        loss = keras.losses.MeanSquaredError()(y, y_pred)
        return loss, private_trainer.unscale_loss(loss)

    scaled, unscaled = (strategy.experimental_local_results(v)
                        for v in strategy.run(replica))
    np.testing.assert_allclose(scaled, [2.5, 2.5])  # 5.0 over 2 replicas
    np.testing.assert_allclose(unscaled, [5.0, 5.0])
    assert float(private_trainer.unscale_loss(tf.constant(5.0))) == 5.0  # no strategy


def test_a_keras_without_unscale_gets_the_clear_error(monkeypatch):
    monkeypatch.delattr(importlib.import_module("keras.src.losses.loss"),
                        "unscale_loss_for_distribution")
    with pytest.raises(PrivateNameError, match=_missing(
            "keras.src.losses.loss.unscale_loss_for_distribution", "the Keras installation")):
        private_trainer.unscale_loss(1.0)


def test_set_optional_spec_gives_an_empty_optional_its_spec():
    optional = tf.experimental.Optional.empty(None)
    spec = tf.TensorSpec([2], tf.float32)
    private.set_optional_spec(optional, spec)
    assert optional.element_spec == spec


# ------------------------------------------------------------------ Keras' callbacks


def _fit(callback, epochs=2, batches=4):
    """Trains a small model for `epochs` with `callback`; returns the epochs it ran."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    ran = []
    seen = keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs: ran.append(epoch))
    model.fit(np.ones((2 * batches, 3)), np.ones((2 * batches, 1)), batch_size=2,
              epochs=epochs, verbose=0, callbacks=[callback, seen])
    return ran


def test_fit_starts_at_the_epoch_set_when_training_begins():
    class Resume(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            private_callbacks.set_initial_epoch(self.model, 2)

    assert _fit(Resume(), epochs=4) == [2, 3], f"Keras {keras.__version__} ignores it"


# ------------------------------------------------------------------ TensorFlow


def test_dataset_inputs_walk_back_to_the_source():
    source = tf.data.Dataset.range(10)
    batched = source.batch(2)
    mapped = batched.map(lambda x: x + 1)
    assert private.dataset_inputs(mapped) == [batched]
    assert private.dataset_inputs(batched) == [source]
    assert private.dataset_inputs(source) == []
    zipped = tf.data.Dataset.zip((source, batched))
    assert private.dataset_inputs(zipped) == [source, batched]


def test_collective_key_base_is_where_a_mirrored_strategy_starts(monkeypatch):
    cls = tf.distribute.MirroredStrategy
    base = private_runtime.collective_key_base(cls)
    assert isinstance(base, int)
    monkeypatch.setattr(cls, "_collective_key_base", base)
    private_runtime.set_collective_key_base(cls, base + 7_000_000)
    strategy = cls(["/cpu:0", "/cpu:1"])
    assert strategy.extended._collective_key_base == base + 7_000_000


def test_a_strategy_class_without_collective_key_base_gets_the_clear_error(monkeypatch):
    monkeypatch.delattr(tf.distribute.MirroredStrategy, "_collective_key_base")
    with pytest.raises(PrivateNameError, match=_missing(
            "MirroredStrategy._collective_key_base", "strategy_class=MirroredStrategy")):
        private_runtime.collective_key_base(tf.distribute.MirroredStrategy)
    monkeypatch.setattr(tf.distribute.MirroredStrategy, "_collective_key_base", "0",
                        raising=False)
    with pytest.raises(PrivateNameError):
        private_runtime.set_collective_key_base(tf.distribute.MirroredStrategy, 1)


_COORDINATION = """
import json
from mgpu_tf.compat import private_runtime
from tensorflow.python.eager import context

first = private_runtime.configure_coordination_service(
    "/job:chief/replica:0/task:0", {"chief": 1, "worker": 2}, 1500)
second = private_runtime.configure_coordination_service("/job:worker/replica:0/task:0", {}, 10)
config = context.context().coordination_service
print(json.dumps({
    "first": first, "second": second, "type": config.service_type,
    "leader": config.service_leader, "heartbeat": config.heartbeat_timeout_in_ms,
    "shutdown": config.shutdown_barrier_timeout_in_ms,
    "jobs": {j.name: j.num_tasks for j in config.coordinated_job_list}}))
"""


def test_configure_coordination_service_sets_it_once():
    # In a fresh process: the setting lasts for the life of TensorFlow's context.
    result = workers.run_python("-c", _COORDINATION, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {
        "first": True, "second": False, "type": "standalone",
        "leader": "/job:chief/replica:0/task:0", "heartbeat": 1500, "shutdown": 1500,
        "jobs": {"chief": 1, "worker": 2}}


def test_a_tensorflow_without_the_coordination_service_gets_the_clear_error(monkeypatch):
    from tensorflow.python.eager import context

    monkeypatch.delattr(context, "coordination_config_pb2")
    with pytest.raises(PrivateNameError, match=_missing(
            "tensorflow.python.eager.context", "service_leader='/job:worker/replica:0/task:0'")):
        private_runtime.configure_coordination_service("/job:worker/replica:0/task:0", {"worker": 1}, 1)
    assert context.context().coordination_service is None


def test_default_strategy_inside_and_outside_a_scope():
    default = tf.distribute.get_strategy()
    assert private_runtime.default_strategy() is default
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        assert private_runtime.default_strategy() is default
        assert mgpu_tf.strategy_kind(default) == "default"
    assert mgpu_tf.strategy_kind(default) == "default"
    assert mgpu_tf.strategy_kind(strategy) == "mirrored"


def test_default_strategy_without_a_scope_stack_per_graph(monkeypatch):
    monkeypatch.setattr(tf.distribute, "has_strategy", lambda: True)
    with pytest.raises(PrivateNameError, match=_missing(
            "the strategy scope stack of each graph", "a call inside a scope")):
        private_runtime.default_strategy()


# ------------------------------------------------------------------ the source scan

# The modules that hold the accessors, the only ones allowed to reach a private name.
ACCESSORS = ("mgpu_tf/compat/private.py", "mgpu_tf/compat/private_callbacks.py",
             "mgpu_tf/compat/private_trainer.py", "mgpu_tf/compat/private_collectives.py",
             "mgpu_tf/compat/private_runtime.py", "mgpu_tf/compat/private_graph.py")
# Python code of the project that is not a test, beside the package (tests check
# upstream behaviour, so they reach private names on purpose).
_ALSO_SCANNED = ("benchmarks",)

_PRIVATE_MODULES = ("keras.src", "tensorflow.python", "tensorflow.compiler", "tensorflow.core",
                    "tensorflow.tsl", "tf_keras.src")
_UPSTREAM = ("keras", "tensorflow", "tf_keras")
_BY_NAME = {"getattr", "hasattr", "setattr", "delattr", "__getattribute__", "__setattr__",
            "__delattr__"}

# Private names that modules outside the accessors still use themselves: the path (or
# folder) of the modules, and the names. Each is to move behind an accessor.
_NOT_YET_ROUTED = {
}


def _is_private(name):
    dunder = name.startswith("__") and name.endswith("__")
    return name.startswith("_") and not name.startswith("_mgpu_tf") and not dunder


def _is_private_module(name):
    return any(name == m or name.startswith(m + ".") for m in _PRIVATE_MODULES)


def _dotted(node):
    """`keras.callbacks.Callback` for that expression; None for anything but dotted names."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _module_name(path):
    """`mgpu_tf.a.b` for `mgpu_tf/a/b.py`; a package's `__init__.py` gives the package."""
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


class _Module:
    """One module: its syntax tree, the names its imports bind, the classes it defines."""

    def __init__(self, path, source):
        self.path, self.name, self.tree = path, _module_name(path), ast.parse(source)
        package = self.name.split(".")[:None if path.endswith("__init__.py") else -1]
        # Bound name -> the dotted name it stands for: mgpu_tf's, and Keras' or TensorFlow's.
        self.ours, self.upstream = {}, {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._bind(alias.asname or alias.name.split(".")[0],
                               alias.name if alias.asname else alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    module = ".".join(package[:len(package) - node.level + 1] + [module]).strip(".")
                for alias in node.names:
                    self._bind(alias.asname or alias.name, f"{module}.{alias.name}")
        self.classes = [node for node in ast.walk(self.tree) if isinstance(node, ast.ClassDef)]
        self.top = {node.name: node for node in self.tree.body if isinstance(node, ast.ClassDef)}
        # A base named without a module: a class of this module, top-level ones first.
        self.local = {**{c.name: c for c in reversed(self.classes)}, **self.top}

    def _bind(self, name, target):
        root = target.split(".")[0]
        if root == "mgpu_tf":
            self.ours[name] = target
        elif root in _UPSTREAM:
            self.upstream[name] = target


class _Package:
    """Modules by dotted name, and the classes each class extends, across modules."""

    def __init__(self, sources):
        self.modules = {m.name: m for m in (_Module(p, s) for p, s in sources.items())}
        self.unresolved = []  # "path:line: base" for mgpu_tf bases the scan cannot follow

    def find_class(self, dotted, seen=()):
        """`(module, class)` for the dotted name of one of the package's classes, or None."""
        module_name, _, name = dotted.rpartition(".")
        module = self.modules.get(module_name)
        if module is None or dotted in seen:
            return None
        if name in module.top:
            return module, module.top[name]
        if name in module.ours:  # imported there, maybe re-exported
            return self.find_class(module.ours[name], seen + (dotted,))
        # A name a package exports lazily: the one class of that name in its modules.
        found = [(m, m.top[name]) for m in self.modules.values()
                 if m.name.startswith(module_name + ".") and name in m.top]
        return found[0] if len(found) == 1 else None

    def bases(self, module, cls):
        """`(package classes, dotted upstream names)` that `cls` extends directly."""
        ours, upstream = [], []
        for base in cls.bases:
            dotted = _dotted(base)
            head, _, rest = (dotted or "").partition(".")
            tail = f".{rest}" if rest else ""
            if head in module.upstream:
                upstream.append(module.upstream[head] + tail)
            elif head in module.ours:
                found = self.find_class(module.ours[head] + tail)
                if found is None:
                    self.unresolved.append(f"{module.path}:{base.lineno}: {dotted}")
                else:
                    ours.append(found)
            elif not rest and head in module.local and module.local[head] is not cls:
                ours.append((module, module.local[head]))
        return ours, upstream

    def family(self, module, cls):
        """`cls` and every package class it extends, however deep, and the upstream bases."""
        family, upstream, todo = [], [], [(module, cls)]
        while todo:
            where, member = todo.pop(0)
            if any(member is known for _, known in family):
                continue
            family.append((where, member))
            ours, theirs = self.bases(where, member)
            todo += ours
            upstream += theirs
        return [member for _, member in family], upstream


def _upstream_object(dotted):
    """The Keras or TensorFlow object a dotted name stands for, or None when not found."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            found = getattr(found, attr, None)
        return found
    return None


def _defined(cls):
    """The names a class defines: its methods, class attributes and `self.x = ...`."""
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign))
                   else [])
        for target in [t for group in targets for t in ast.walk(group)]:
            if isinstance(target, ast.Name):
                names.add(target.id)
            elif (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                  and target.value.id in ("self", "cls")):
                names.add(target.attr)
    return names


def _class_uses(package, module, cls):
    """Private names a class that extends a Keras or TensorFlow class, however deep, inherits.

    `self._x` (or `cls._x`) is upstream state unless a class of the family between
    `cls` and upstream defines it; a private method or class attribute of `cls`
    overrides an upstream one when an upstream base has that name (or cannot be
    imported to tell).
    """
    family, upstream = package.family(module, cls)
    if not upstream:
        return []
    inherited = set().union(*(_defined(member) for member in family[1:]))
    own = _defined(cls) | inherited
    bases = [_upstream_object(name) for name in upstream]

    def overrides(name):
        return name not in inherited and any(b is None or hasattr(b, name) for b in bases)

    uses = []
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            named = [(node.name, f"def {node.name}")]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            named = [(t.id, f"{t.id} = ...") for t in targets if isinstance(t, ast.Name)]
        else:
            named = []
        uses += [(node.lineno, name, code) for name, code in named
                 if _is_private(name) and overrides(name)]
    for node in ast.walk(cls):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls") and _is_private(node.attr)
                and node.attr not in own):
            uses.append((node.lineno, node.attr, ast.unparse(node)))
    return uses


def _module_uses(module):
    """Private names one module reaches without the help of its classes' bases."""
    uses = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            uses += [(node.lineno, a.name, f"import {a.name}") for a in node.names
                     if _is_private_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and _is_private_module(node.module or ""):
            uses.append((node.lineno, node.module, f"from {node.module} import ..."))
        elif isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if node.attr == "__internal__" or (
                    _is_private(node.attr) and owner not in {"self", "cls", *module.ours}):
                uses.append((node.lineno, node.attr, ast.unparse(node)))
        elif isinstance(node, ast.Call):
            called = (node.func.id if isinstance(node.func, ast.Name)
                      else node.func.attr if isinstance(node.func, ast.Attribute) else None)
            strings = [a.value for a in node.args
                       if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if (called in _BY_NAME and len(node.args) >= 2
                    and isinstance(node.args[1], ast.Constant)
                    and isinstance(node.args[1].value, str) and _is_private(node.args[1].value)):
                uses.append((node.lineno, node.args[1].value, ast.unparse(node)))
            if (called in ("import_module", "__import__") and strings
                    and _is_private_module(strings[0])):
                uses.append((node.lineno, strings[0], ast.unparse(node)))
    return uses


def scan_sources(sources, *, skip=()):
    """The private Keras or TensorFlow names each module of `sources` reaches.

    Args:
        sources: `{path: source}`, such as `{"mgpu_tf/a/b.py": "..."}`; classes are
            followed across these modules.
        skip: paths whose uses are not reported (their classes are still followed).

    Returns:
        `({path: [(line, private name, code)]}, unresolved bases)`. Uses are imports of
        `keras.src`, `tensorflow.python` and the like; attributes starting with `_` on
        anything but `self`, `cls` and mgpu_tf's own modules (`_mgpu_tf*` markers and
        dunders are ours or Python's), also when named by a string in `getattr`,
        `setattr`, `object.__setattr__` and the like; `super()._x`; and, in any class
        extending a Keras or TensorFlow class however deep (through classes of other
        modules too), upstream private state read through `self` and overridden
        upstream private methods.
    """
    package = _Package(sources)
    found = {}
    for module in package.modules.values():
        if module.path in skip:
            continue
        uses = _module_uses(module)
        for cls in module.classes:
            uses += _class_uses(package, module, cls)
        if uses:
            found[module.path] = sorted(set(uses))
    return found, package.unresolved


def private_uses(source):
    """`[(line, private name, code)]`: what `scan_sources` finds in one module on its own."""
    return scan_sources({"mgpu_tf/module.py": source})[0].get("mgpu_tf/module.py", [])


def _sources(package):
    """`{path: source}` for the package (a copy of it too) and the project's other code."""
    paths = {f"mgpu_tf/{p.relative_to(package).as_posix()}": p for p in package.rglob("*.py")}
    for folder in _ALSO_SCANNED:
        paths.update({f"{folder}/{p.relative_to(package.parent / folder).as_posix()}": p
                      for p in (package.parent / folder).rglob("*.py")})
    return {path: paths[path].read_text() for path in sorted(paths)}


def _scan(package):
    """`{path: uses}` for every module outside the accessors, minus the known ones."""
    found, unresolved = scan_sources(_sources(package), skip=ACCESSORS)
    assert not unresolved, f"the scan cannot follow these base classes: {unresolved}"
    out = {}
    for path, uses in found.items():
        allowed = set().union(*(names for where, names in _NOT_YET_ROUTED.items()
                                if path.startswith(where)))
        uses = [u for u in uses if u[1] not in allowed]
        if uses:
            out[path] = uses
    return out


def test_no_module_outside_the_accessors_reaches_a_private_name():
    found = _scan(PACKAGE)
    assert not found, (
        "These modules reach private Keras or TensorFlow names themselves; call an "
        "accessor of mgpu_tf.compat.private instead (add one there, with its known "
        "releases in mgpu_tf/compat/versions.py and a test in this file):\n"
        + "\n".join(f"  {path}:{line}: {code}" for path, uses in found.items()
                    for line, _, code in uses))


def test_the_scan_fails_on_a_scratch_copy_with_a_private_name(tmp_path):
    copy = tmp_path / "mgpu_tf"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    module = copy / "model_parallel" / "partition.py"
    module.write_text(module.read_text() + "\n\ndef _graph(model):\n    return model._functional\n")
    found = _scan(copy)
    assert list(found) == ["mgpu_tf/model_parallel/partition.py"]
    assert [code for _, _, code in found["mgpu_tf/model_parallel/partition.py"]] == [
        "model._functional"]


_BASE = """
import keras

class Base(keras.Model):
    def __init__(self):
        super().__init__()
        self._stages = []

    def _ours(self):
        return self._stages
"""

_MIDDLE = """
from mgpu_tf.a import base

class Middle(base.Base):
    pass
"""

_DEEP = """
from mgpu_tf.b.middle import Middle

class Deep(Middle):
    def _helper(self):
        return self._stages, self._ours()

    def train_step(self, data):
        self._loss_tracker.update_state(0.0)
        return self._helper()

    def _compute_loss(self, **kwargs):
        return 0.0
"""


def test_the_scan_follows_a_keras_class_across_modules():
    found, unresolved = scan_sources({"mgpu_tf/a/base.py": _BASE, "mgpu_tf/b/middle.py": _MIDDLE,
                                      "mgpu_tf/c/deep.py": _DEEP})
    assert unresolved == []
    # Two modules away from keras.Model: Keras' loss tracker and its _compute_loss
    # override are upstream's; the family's own state and methods are not.
    assert found == {"mgpu_tf/c/deep.py": [
        (9, "_loss_tracker", "self._loss_tracker"), (12, "_compute_loss", "def _compute_loss")]}
    # On its own, Deep's bases are unknown, so nothing says it is a Keras class.
    assert private_uses(_DEEP) == []


def test_the_scan_says_which_bases_it_cannot_follow():
    _, unresolved = scan_sources({"mgpu_tf/c/deep.py": _DEEP})
    assert unresolved == ["mgpu_tf/c/deep.py:4: Middle"]


def test_the_scan_catches_keras_state_in_a_subclass_of_a_package_class(tmp_path):
    # HybridParallel extends ModelParallel, which extends keras.Model in another module.
    copy = tmp_path / "mgpu_tf"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    module = copy / "model_parallel" / "hybrid" / "model.py"
    module.write_text(module.read_text() + (
        "\n\nclass _Logged(HybridParallel):\n"
        "    def test_step(self, data):\n"
        "        self._loss_tracker.reset_state()\n"
        "        return super().test_step(data)\n"))
    found = _scan(copy)
    assert list(found) == ["mgpu_tf/model_parallel/hybrid/model.py"]
    [(_, name, code)] = found["mgpu_tf/model_parallel/hybrid/model.py"]
    assert (name, code) == ("_loss_tracker", "self._loss_tracker")


_VIOLATIONS = '''
import importlib
import keras
import tensorflow as tf
from keras.src.backend.tensorflow import trainer
import tensorflow.python.eager.context as context
from mgpu_tf.model_parallel import partition

def f(model, optimizer, dataset):
    a = model._functional
    b = getattr(optimizer, "_trainable_variables")
    object.__setattr__(optimizer, "_all_reduce_sum_gradients", None)
    c = tf.__internal__
    d = importlib.import_module("keras.src.models")
    e = dataset._inputs()
    return a, b, c, d, e

class Checkpoint(keras.callbacks.ModelCheckpoint):
    def _save_model(self, epoch, batch, logs):
        super()._save_model(epoch, batch, logs)
        return self._model
'''

_ALLOWED = '''
import keras
from mgpu_tf.model_parallel import partition

_MARK = "_mgpu_tf_placed"

class _Ours:
    _scratch = None

    def _redirect(self):
        return self._scratch

class Checkpoint(_Ours, keras.callbacks.ModelCheckpoint):
    def __init__(self):
        super().__init__("x.keras")
        self._count = 0

    def _redirect(self):
        self._count += 1
        return partition._functional(self.model), self.__class__, self._scratch

def f(optimizer, cls):
    optimizer._mgpu_tf_placed = getattr(optimizer, _MARK, False)
    return cls._known, type(optimizer).__name__
'''


def test_the_scan_sees_each_kind_of_private_use():
    names = [name for _, name, _ in private_uses(_VIOLATIONS)]
    assert names == [
        "keras.src.backend.tensorflow", "tensorflow.python.eager.context", "_functional",
        "_trainable_variables", "_all_reduce_sum_gradients", "__internal__",
        "keras.src.models", "_inputs", "_save_model", "_save_model", "_model"]


def test_the_scan_allows_our_own_private_names():
    assert private_uses(_ALLOWED) == []


# ------------------------------------------------------------------ capabilities by release


@pytest.mark.parametrize("installed, refused", [("3.9.2", True), ("3.8.0", True),
                                                ("3.10.0", False), ("3.15.1", False)])
def test_a_capability_refuses_a_release_before_its_first(monkeypatch, installed, refused):
    from mgpu_tf.compat import releases

    monkeypatch.setattr(releases, "installed_version", lambda library: installed)
    if not refused:
        versions.refuse_below("keras", (3, 10), "shard_optimizer_state")
        return
    with pytest.raises(ValueError, match=re.escape(
            f"shard_optimizer_state needs Keras 3.10 or later. Received: keras=={installed}. "
            "pip install 'keras>=3.10', or leave it off.")):
        versions.refuse_below("keras", (3, 10), "shard_optimizer_state")


def test_shard_optimizer_state_refuses_keras_before_3_10_at_make_strategy():
    if versions.release_in(keras.__version__, (3, 10), (3, 99)):
        strategy = mgpu_tf.make_strategy("mirrored", devices=2, shard_optimizer_state=True)
        assert strategy.num_replicas_in_sync == 2
        return
    with pytest.raises(ValueError, match="shard_optimizer_state needs Keras 3.10 or later. "):
        mgpu_tf.make_strategy("mirrored", devices=2, shard_optimizer_state=True)


def _apply_replica_numbers(strategy, optimizer, variable):
    """One step of `optimizer` in which replica k's gradient of `variable` is k + 1."""

    @tf.function
    def step():
        def replica_step():
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            optimizer.apply([tf.cast(tf.reshape(replica + 1, [1]), tf.float32)], [variable])
        strategy.run(replica_step)

    step()
