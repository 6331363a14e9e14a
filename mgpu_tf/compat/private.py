"""Every private Keras or TensorFlow name mgpu_tf touches, each behind one accessor.

Each accessor's docstring names the private name and the releases it is known for
(`versions.KNOWN`); a name that is gone raises `PrivateNameError`, saying what to
install. Keras' trainer has its accessors in `private_trainer`, its callbacks in
`private_callbacks`, TensorFlow's collective launchers in `private_collectives`, its
runtime (coordination service, collective keys, default strategy) in `private_runtime`.

Design: docs/design.md#private-names-and-versions
"""

from mgpu_tf.compat.versions import PrivateNameError, attribute, check, describe, method, missing

__all__ = [
    "PrivateNameError",
    "call_has_training_arg",
    "checkpoint_through",
    "dataset_inputs",
    "functional_nodes",
    "global_shuffle",
    "is_functional",
    "layer_build_method",
    "nested_layers",
    "optimizer_class_method",
    "optimizer_type_method",
    "optimizer_variables",
    "reinitialize_variable",
    "random_seed_cast",
    "require",
    "sequential_graph",
    "set_layer_build_method",
    "set_optimizer_class_method",
    "set_optional_spec",
    "set_random_seed_cast",
    "set_variable_method",
    "track_optimizer_variable",
    "variable_index",
    "variable_method",
    "variable_storage",
    "wrap_optimizer_method",
]

_OPTIMIZER_METHODS = ("build", "apply", "update_step", "add_variable_from_reference",
                      "save_own_variables", "load_own_variables", "_all_reduce_sum_gradients",
                      "_backend_update_step", "_clip_gradients")
# The private methods Keras' TensorFlow optimizer class defines; the rest are its base's.
_TF_OPTIMIZER_METHODS = ("_all_reduce_sum_gradients", "_backend_update_step")


def require(obj, *names, argument="obj"):
    """Checks now that `obj` has the private `names` (keys of `KNOWN`): no step finds one missing.

    `argument` is what the error calls `obj`.
    """
    for name in names:
        attribute(obj, name, f"{argument}={describe(obj)}")


# ------------------------------------------------------------------ models and layers


def sequential_graph(model):
    """Returns the functional model a Sequential runs, or None while it has none.

    `Sequential._functional` (Keras 3.8-3.16).
    """
    return attribute(model, "Sequential._functional", f"model={describe(model)}")


def is_functional(model):
    """Returns True when `model` is a functional Keras model (`keras.Model(inputs, outputs)`).

    `keras.src.models.functional.Functional` (Keras 3.8-3.16), not exported.
    """
    name = "keras.src.models.functional.Functional"
    check(name)
    try:
        from keras.src.models.functional import Functional
    except ImportError:
        raise missing(name, f"model={describe(model)}") from None
    return isinstance(model, Functional)


def functional_nodes(model):
    """Returns a functional model's operation nodes in topological order, inputs left out.

    `Functional._nodes_by_depth` (Keras 3.8-3.16): `{depth: nodes}`, outputs at depth 0.
    """
    by_depth = attribute(model, "Functional._nodes_by_depth", f"model={describe(model)}")
    nodes = []
    for depth in sorted(by_depth, reverse=True):
        nodes += [node for node in by_depth[depth] if not node.is_input]
    return nodes


def nested_layers(layer):
    """Returns every layer inside `layer`, nested ones included, `layer` itself left out.

    `Layer._flatten_layers(include_self, recursive)` (Keras 3.8-3.16).
    """
    flatten = method(layer, "Layer._flatten_layers", f"layer={describe(layer)}")
    return list(flatten(include_self=False))


def call_has_training_arg(layer):
    """Returns True when the layer's `call` takes a `training` argument.

    `Layer._call_has_training_arg` (Keras 3.8-3.16), read by Keras' train and test steps.
    """
    return bool(attribute(layer, "Layer._call_has_training_arg", f"layer={describe(layer)}"))


def reinitialize_variable(variable, value):
    """Gives a Keras variable new storage holding `value`, made under the current device scope.

    `Variable._initialize(value)` (Keras 3.8-3.16); Keras has no public way to move a variable.
    """
    method(variable, "Variable._initialize", f"variable={describe(variable)}")(value)


def variable_storage(variable):
    """Returns the `tf.Variable` (a distributed one under a strategy) behind a Keras variable.

    `Variable._value` (Keras 3.8-3.16).
    """
    return attribute(variable, "Variable._value", f"variable={describe(variable)}")


_VARIABLE_METHODS = ("assign_add", "assign_sub")


def variable_method(name):
    """Returns `keras.Variable`'s method `name` (`assign_add` or `assign_sub`), patched or not.

    Public methods, which Keras' metrics and optimizers call through each variable, so that
    the class's attribute takes their place (Keras 3.8-3.16).
    """
    import keras

    if name not in _VARIABLE_METHODS:
        raise ValueError(f"`name` must be one of {', '.join(_VARIABLE_METHODS)}. "
                         f"Received: name={name!r}")
    return method(keras.Variable, f"Variable.{name}", "the Keras installation")


def set_variable_method(name, function):
    """Puts `function` in place of `variable_method(name)` for every Keras variable."""
    import keras

    variable_method(name)
    setattr(keras.Variable, name, function)


# ------------------------------------------------------------------ optimizers


def optimizer_variables(optimizer):
    """Returns the model variables a built optimizer updates, in its own order.

    `BaseOptimizer._trainable_variables` (Keras 3.8-3.16).
    """
    return list(attribute(optimizer, "BaseOptimizer._trainable_variables",
                          f"optimizer={describe(optimizer)}"))


def track_optimizer_variable(optimizer, variable):
    """Lists `variable` in `optimizer.variables`, where Keras users and TensorFlow's
    checkpoints (which track that list) find the optimizer's state.

    `BaseOptimizer._track_variable(variable)` (Keras 3.8-3.16).
    """
    method(optimizer, "BaseOptimizer._track_variable",
           f"optimizer={describe(optimizer)}")(variable)


def variable_index(optimizer, variable):
    """Returns the position of `variable` in `optimizer_variables(optimizer)`.

    `BaseOptimizer._get_variable_index(variable)` (Keras 3.8-3.16).
    """
    index = method(optimizer, "BaseOptimizer._get_variable_index",
                   f"optimizer={describe(optimizer)}")
    return index(variable)


def wrap_optimizer_method(optimizer, name, wrap):
    """Replaces one optimizer's method `name` by `wrap(original)`, for this instance only.

    Keras calls these methods through the instance (`self.update_step(...)`), so an
    instance attribute takes their place: `build` and `apply` (Keras' trainer and
    `apply_gradients` call them), `update_step` and `add_variable_from_reference`,
    `save_own_variables` and `load_own_variables` (Keras' saving calls them)
    (Keras 3.8-3.16), the private `TFOptimizer._all_reduce_sum_gradients`
    (Keras 3.8-3.16), which sums `(gradient, variable)` pairs over replicas,
    `TFOptimizer._backend_update_step` (Keras 3.8-3.16), which sums and applies them,
    and `BaseOptimizer._clip_gradients` (Keras 3.8-3.16), which clips the gradients
    before that sum (`clipnorm`, `global_clipnorm`, `clipvalue`).

    Args:
        optimizer: a Keras optimizer of the TensorFlow backend.
        name: one of `_OPTIMIZER_METHODS`.
        wrap: called with the optimizer's current method; returns its replacement.

    Returns:
        The replacement.

    Raises:
        ValueError: for another `name`.
        PrivateNameError: when the optimizer has no such method.
    """
    if name not in _OPTIMIZER_METHODS:
        raise ValueError(f"`name` must be one of {', '.join(_OPTIMIZER_METHODS)}. "
                         f"Received: name={name!r}")
    original = method(optimizer, _known_name(name), f"optimizer={describe(optimizer)}")
    replacement = wrap(original)
    # object.__setattr__: Keras' optimizer would track the function as state.
    object.__setattr__(optimizer, name, replacement)
    return replacement


def _known_name(name):
    """The optimizer method `name` as `KNOWN` names it, with the class defining it."""
    return f"{'TFOptimizer' if name in _TF_OPTIMIZER_METHODS else 'BaseOptimizer'}.{name}"


def _optimizer_owner(name):
    """The Keras optimizer class that defines method `name`, and its name in `KNOWN`."""
    import keras

    if name not in _OPTIMIZER_METHODS:
        raise ValueError(f"`name` must be one of {', '.join(_OPTIMIZER_METHODS)}. "
                         f"Received: name={name!r}")
    known = _known_name(name)
    for owner in keras.optimizers.Optimizer.__mro__:
        if name in vars(owner):
            return owner, known
    raise missing(known, "the Keras installation")


def optimizer_class_method(name):
    """Returns the method `name` (as `wrap_optimizer_method` takes) of Keras' optimizer classes.

    Raises:
        ValueError: for another `name`.
        PrivateNameError: when no optimizer class defines it.
    """
    owner, known = _optimizer_owner(name)
    return method(owner, known, "the Keras installation")


def optimizer_type_method(optimizer, name):
    """Returns the method `name` (as `wrap_optimizer_method` takes) that `optimizer`'s class
    runs: `optimizer_class_method(name)` unless its class defines its own."""
    if name not in _OPTIMIZER_METHODS:
        raise ValueError(f"`name` must be one of {', '.join(_OPTIMIZER_METHODS)}. "
                         f"Received: name={name!r}")
    return method(type(optimizer), _known_name(name), f"optimizer={describe(optimizer)}")


def set_optimizer_class_method(name, function):
    """Puts `function` in place of `optimizer_class_method(name)` for every optimizer."""
    owner, _ = _optimizer_owner(name)
    optimizer_class_method(name)
    setattr(owner, name, function)


def layer_build_method():
    """Returns `Layer._maybe_build(self, call_spec)` (Keras 3.8-3.16), as it is now (patched or
    not): what a layer's first call runs to make its variables."""
    import keras

    return method(keras.layers.Layer, "Layer._maybe_build", "the Keras installation")


def set_layer_build_method(function):
    """Puts `function` in place of `layer_build_method()` for every layer."""
    import keras

    layer_build_method()
    keras.layers.Layer._maybe_build = function


# ------------------------------------------------------------------ TensorFlow


def checkpoint_through(variable, serialize, restore):
    """Makes TensorFlow's checkpoints save `variable` as `serialize()` and restore it with
    `restore(tensor)`, for a variable whose stored value is not what its parts hold.

    `Trackable._serialize_to_tensors` / `_restore_from_tensors` (TensorFlow 2.18-2.22):
    `variable` (this one only) becomes an instance of a subclass with those two methods.

    Args:
        variable: a Keras or TensorFlow variable.
        serialize: returns the tensor a checkpoint stores.
        restore: takes the tensor a checkpoint read.
    """
    received = f"variable={describe(variable)}"
    method(variable, "Trackable._serialize_to_tensors", received)
    method(variable, "Trackable._restore_from_tensors", received)
    key = "VARIABLE_VALUE"  # the key of a variable's value, which checkpoints show

    def serialize_to_tensors(self):
        return {key: serialize()}

    def restore_from_tensors(self, restored_tensors):
        return restore(restored_tensors[key])

    cls = type(variable)
    variable.__class__ = type(cls.__name__, (cls,), {
        "_serialize_to_tensors": serialize_to_tensors,
        "_restore_from_tensors": restore_from_tensors})



def dataset_inputs(dataset):
    """Returns the data sets `dataset` reads from (none for a source such as `range`).

    `DatasetV2._inputs()` (TensorFlow 2.18-2.22).
    """
    inputs = method(dataset, "DatasetV2._inputs", f"dataset={describe(dataset)}")
    return list(inputs())


_SEED_CAST = "keras.src.backend.tensorflow.random._cast_seed"


def random_seed_cast():
    """The function through which Keras' TensorFlow backend turns every seed into an op's.

    `keras.src.backend.tensorflow.random._cast_seed` (Keras 3.8-3.16).
    """
    check(_SEED_CAST)
    try:
        from keras.src.backend.tensorflow import random

        return random._cast_seed
    except (ImportError, AttributeError):
        raise missing(_SEED_CAST, "the Keras installation") from None


def set_random_seed_cast(function):
    """Puts `function` in place of `random_seed_cast()`, which Keras' random ops look up."""
    from keras.src.backend.tensorflow import random

    random._cast_seed = function


def global_shuffle(dataset, seed):
    """`dataset` in an order drawn from `seed`, read by index: no shuffle buffer to fill.

    `global_shuffle_op._global_shuffle` (TensorFlow 2.18-2.22), which `tf.data` has not made
    public yet. Every step before it must support random access; an iterator of the result
    fails when one does not.
    """
    name = "tensorflow.python.data.experimental.ops.global_shuffle_op._global_shuffle"
    check(name)
    try:
        from tensorflow.python.data.experimental.ops import global_shuffle_op

        shuffle = global_shuffle_op._global_shuffle
    except (ImportError, AttributeError):
        raise missing(name, f"dataset={describe(dataset)}") from None
    return shuffle(dataset, seed=seed, reshuffle_each_iteration=False)


def set_optional_spec(optional, spec):
    """Gives a `tf.experimental.Optional` the element spec it is to have.

    `Optional._element_spec` (TensorFlow 2.18-2.22): an empty optional made before a
    `tf.while_loop` learns its spec only when the values are traced.
    """
    attribute(optional, "Optional._element_spec", f"optional={describe(optional)}")
    optional._element_spec = spec
