"""The private names of Keras' TensorFlow trainer that mgpu_tf touches, each behind one accessor.

The fixes for Keras under `tf.distribute` wrap or replace the trainer's code, and the
shared train step finds the model's loss there; each accessor works as `compat.private`'s do.
"""

import importlib

from mgpu_tf.compat.versions import (PrivateNameError, attribute, check, describe, method, missing,
                                     release_in, trainer_class_name)

__all__ = [
    "PrivateNameError",
    "autoconvert_optionals",
    "compute_loss",
    "get_data_adapter",
    "is_multi_worker",
    "is_tf_dataset",
    "keras_trainer",
    "loss_tracker",
    "model_strategy",
    "patched_by",
    "set_get_data_adapter",
    "set_is_tf_dataset",
    "set_trainer_function",
    "trainer_classes",
    "trainer_function",
    "unscale_loss",
]

_TRAINER_FUNCTIONS = ("TensorFlowTrainer._maybe_symbolic_build", "reduce_per_replica",
                      "_collective_all_reduce_multi_worker", "TensorFlowTrainer._make_function",
                      "TensorFlowTrainer.make_train_function",
                      "TensorFlowTrainer.make_test_function",
                      "TensorFlowTrainer.make_predict_function", "TensorFlowTrainer.train_step",
                      "TensorFlowTrainer.test_step", "TensorFlowTrainer.fit",
                      "Trainer.compile", "Trainer.compute_loss", "Trainer.get_metrics_result",
                      "Trainer.reset_metrics")


def keras_trainer():
    """Returns Keras' `keras.src.backend.tensorflow.trainer` module (Keras 3.8-3.16)."""
    name = "keras.src.backend.tensorflow.trainer"
    check(name)
    try:
        return importlib.import_module(name)
    except ImportError:
        raise missing(name, "the Keras installation") from None


def trainer_classes(name="TensorFlowTrainer.fit"):
    """Returns Keras' TensorFlow trainer class and its base, chosen by release
    (`versions.TRAINER_CLASS_NAMES`); `PrivateNameError` for `name` when the class is gone."""
    import keras

    trainer = keras_trainer()
    class_name = trainer_class_name(keras.__version__)
    tensorflow_trainer = getattr(trainer, class_name, None)
    if not isinstance(tensorflow_trainer, type):
        raise missing(name, f"{trainer.__name__} without a class {class_name}")
    return tensorflow_trainer, tensorflow_trainer.__mro__[1]


def _trainer_owner(name):
    if name not in _TRAINER_FUNCTIONS:
        raise ValueError(f"`name` must be one of {', '.join(_TRAINER_FUNCTIONS)}. "
                         f"Received: name={name!r}")
    if not name.startswith(("TensorFlowTrainer.", "Trainer.")):
        return keras_trainer(), f"trainer.{name}"
    tensorflow_trainer, base = trainer_classes(name)
    return (tensorflow_trainer if name.startswith("TensorFlowTrainer.") else base), name


def trainer_function(name):
    """Returns a function of Keras' TensorFlow trainer, as it is now (patched or not).

    `name` is `"TensorFlowTrainer._maybe_symbolic_build"` (Keras 3.8-3.16),
    `"TensorFlowTrainer._make_function"` (Keras 3.8-3.16), `"reduce_per_replica"`,
    `"_collective_all_reduce_multi_worker"`, or `"TensorFlowTrainer."` followed by
    `make_train_function`, `make_test_function`, `make_predict_function`, `train_step`,
    `test_step` or `fit`, or
    `"Trainer."` followed by `compile`, `compute_loss`, `get_metrics_result` or
    `reset_metrics` (Keras 3.8-3.16); another raises
    `ValueError`.
    """
    owner, known = _trainer_owner(name)
    return method(owner, known, "the Keras installation")


def patched_by(name, mark):
    """True when the trainer function `name` is a patch carrying the attribute `mark`;
    False also where this Keras lacks the function."""
    try:
        return bool(getattr(trainer_function(name), mark, False))
    except PrivateNameError:
        return False


def set_trainer_function(name, function):
    """Puts `function` in place of the one `trainer_function(name)` returns.

    Keras calls these by module-level name or through the model, so the replacement runs.
    """
    trainer_function(name)
    setattr(_trainer_owner(name)[0], name.rpartition(".")[2], function)


def _data_adapters_function(name):
    known = f"keras.src.trainers.data_adapters.{name}"
    check(known)
    try:
        module = importlib.import_module("keras.src.trainers.data_adapters")
    except ImportError:
        raise missing(known, "the Keras installation") from None
    return module, method(module, known, "the Keras installation")


def get_data_adapter():
    """Returns Keras' `get_data_adapter(x, ..., shuffle=..., ...)`, as it is now (patched or not).

    `keras.src.trainers.data_adapters.get_data_adapter` (Keras 3.8-3.16), which Keras'
    epoch iterators call by module-level name with keyword arguments.
    """
    return _data_adapters_function("get_data_adapter")[1]


def set_get_data_adapter(function):
    """Puts `function` in place of the one `get_data_adapter()` returns."""
    _data_adapters_function("get_data_adapter")[0].get_data_adapter = function


def is_tf_dataset():
    """Returns Keras' `is_tf_dataset(x)`, as it is now (patched or not).

    `keras.src.trainers.data_adapters.is_tf_dataset` (Keras 3.8-3.16), which
    `get_data_adapter` calls by module-level name to choose the `tf.data` adapter.
    """
    return _data_adapters_function("is_tf_dataset")[1]


def set_is_tf_dataset(function):
    """Puts `function` in place of the one `is_tf_dataset()` returns."""
    _data_adapters_function("is_tf_dataset")[0].is_tf_dataset = function


def is_multi_worker(strategy):
    """Returns True when `strategy` is a MultiWorkerMirroredStrategy over several workers.

    Keras' `_collective_all_reduce_multi_worker(strategy)` (Keras 3.8-3.16).
    """
    return trainer_function("_collective_all_reduce_multi_worker")(strategy)


def model_strategy(model):
    """Returns the strategy a Keras model was created under, or None for none.

    `Trainer._distribute_strategy` (Keras 3.8-3.16); the public property gives the default instead.
    """
    return attribute(model, "Trainer._distribute_strategy", f"model={describe(model)}")


# ------------------------------------------------------------------ the train step


def autoconvert_optionals(model, step_function):
    """Returns `step_function` given None for each empty `tf.experimental.Optional` in its data.

    `TensorFlowTrainer._autoconvert_optionals(step_function)` (Keras 3.12-3.16). Keras 3.8-3.11
    hand a step its data as it comes, and so does this: it returns `step_function` itself.
    """
    import keras

    if release_in(keras.__version__, (3, 0), (3, 11)):
        return step_function
    return method(model, "TensorFlowTrainer._autoconvert_optionals",
                  f"model={describe(model)}")(step_function)


def loss_tracker(model):
    """Returns the metric whose result Keras logs as `loss`.

    `Trainer._loss_tracker` (Keras 3.8-3.16), a `keras.metrics.Mean` the steps update.
    """
    return attribute(model, "Trainer._loss_tracker", f"model={describe(model)}")


def compute_loss(model, x, y, y_pred, sample_weight, training):
    """Returns `model`'s loss for one batch, as Keras' train and test steps compute it.

    `Trainer._compute_loss(...)` (Keras 3.8-3.16), which drops `training` for overrides without it.
    """
    compute = method(model, "Trainer._compute_loss", f"model={describe(model)}")
    return compute(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training)


def unscale_loss(loss):
    """Returns a replica's `loss` times the replicas in sync, as Keras logs it.

    `keras.src.losses.loss.unscale_loss_for_distribution` (Keras 3.8-3.16): Keras' losses divide
    by the replicas under a strategy, so that their gradients add up.
    """
    name = "keras.src.losses.loss.unscale_loss_for_distribution"
    check(name)
    try:
        module = importlib.import_module("keras.src.losses.loss")
    except ImportError:
        raise missing(name, "the Keras installation") from None
    return method(module, name, "the Keras installation")(loss)
