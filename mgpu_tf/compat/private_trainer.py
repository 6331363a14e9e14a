"""The private names of Keras' TensorFlow trainer that mgpu_tf touches, each behind one accessor.

The fixes for Keras under `tf.distribute` wrap or replace the trainer's code, and the
shared train step finds the model's loss there; each accessor works as `compat.private`'s do.
"""

import importlib

from mgpu_tf.compat.versions import PrivateNameError, attribute, check, describe, method, missing

__all__ = [
    "PrivateNameError",
    "autoconvert_optionals",
    "compute_loss",
    "is_multi_worker",
    "keras_trainer",
    "loss_tracker",
    "model_strategy",
    "set_trainer_function",
    "trainer_function",
    "unscale_loss",
]

_TRAINER_FUNCTIONS = ("TensorFlowTrainer._maybe_symbolic_build", "reduce_per_replica",
                      "_collective_all_reduce_multi_worker", "TensorFlowTrainer._make_function",
                      "TensorFlowTrainer.make_train_function",
                      "TensorFlowTrainer.make_test_function", "TensorFlowTrainer.train_step",
                      "TensorFlowTrainer.test_step")


def keras_trainer():
    """Returns Keras' TensorFlow trainer module.

    Touches `keras.src.backend.tensorflow.trainer` (Keras 3.0-3.15).

    Raises:
        PrivateNameError: when Keras has no such module.
    """
    name = "keras.src.backend.tensorflow.trainer"
    check(name)
    try:
        return importlib.import_module(name)
    except ImportError:
        raise missing(name, "the Keras installation") from None


def _trainer_owner(name):
    if name not in _TRAINER_FUNCTIONS:
        raise ValueError(f"`name` must be one of {', '.join(_TRAINER_FUNCTIONS)}. "
                         f"Received: name={name!r}")
    trainer = keras_trainer()
    if name.startswith("TensorFlowTrainer."):
        return trainer.TensorFlowTrainer, name
    return trainer, f"trainer.{name}"


def trainer_function(name):
    """Returns a function of Keras' TensorFlow trainer, as it is now (patched or not).

    Touches `TensorFlowTrainer._maybe_symbolic_build` (Keras 3.5-3.15),
    `_make_function` (Keras 3.7-3.15), `reduce_per_replica`,
    `_collective_all_reduce_multi_worker` and the public step methods (Keras 3.0-3.15).

    Args:
        name: `"TensorFlowTrainer._maybe_symbolic_build"`, `"reduce_per_replica"`,
            `"_collective_all_reduce_multi_worker"`, or `"TensorFlowTrainer."`
            followed by `_make_function`, `make_train_function`,
            `make_test_function`, `train_step` or `test_step`.

    Raises:
        ValueError: for another `name`.
        PrivateNameError: when the trainer has no such function.
    """
    owner, known = _trainer_owner(name)
    return method(owner, known, "the Keras installation")


def set_trainer_function(name, function):
    """Puts `function` in place of the one `trainer_function(name)` returns.

    Keras' trainer calls `reduce_per_replica` by its module-level name, and
    `_maybe_symbolic_build`, `make_train_function` and `make_test_function` through
    the model, so the replacement is what runs.

    Raises:
        ValueError, PrivateNameError: as `trainer_function` does.
    """
    trainer_function(name)
    setattr(_trainer_owner(name)[0], name.rpartition(".")[2], function)


def is_multi_worker(strategy):
    """Returns True when `strategy` is a MultiWorkerMirroredStrategy over several workers.

    Calls Keras' `_collective_all_reduce_multi_worker(strategy)` (Keras 3.0-3.15).

    Raises:
        PrivateNameError: when the trainer has no such function.
    """
    return trainer_function("_collective_all_reduce_multi_worker")(strategy)


def model_strategy(model):
    """Returns the strategy a Keras model was created under, or None for none.

    Touches `Trainer._distribute_strategy` (Keras 3.0-3.15); the public
    `distribute_strategy` gives the default strategy for none, which Keras' build
    treats differently.

    Raises:
        PrivateNameError: when the model has no such attribute.
    """
    return attribute(model, "Trainer._distribute_strategy", f"model={describe(model)}")


# ------------------------------------------------------------------ the train step


def autoconvert_optionals(model, step_function):
    """Returns `step_function` given None for each empty `tf.experimental.Optional` in its data.

    Calls `TensorFlowTrainer._autoconvert_optionals(step_function)` (Keras 3.12-3.15),
    which Keras' train and test functions wrap their step in.

    Raises:
        PrivateNameError: when the model has no such method.
    """
    return method(model, "TensorFlowTrainer._autoconvert_optionals",
                  f"model={describe(model)}")(step_function)


def loss_tracker(model):
    """Returns the metric whose result Keras logs as `loss`.

    Touches `Trainer._loss_tracker` (Keras 3.0-3.15), a `keras.metrics.Mean` that
    Keras' train and test steps update with each batch's loss.

    Raises:
        PrivateNameError: when the model has no such attribute.
    """
    return attribute(model, "Trainer._loss_tracker", f"model={describe(model)}")


def compute_loss(model, x, y, y_pred, sample_weight, training):
    """Returns `model`'s loss for one batch, as Keras' train and test steps compute it.

    Calls `Trainer._compute_loss(x, y, y_pred, sample_weight, training)`
    (Keras 3.4-3.15), which calls the model's `compute_loss` without `training`
    when an override of it has no such argument.

    Raises:
        PrivateNameError: when the model has no such method.
    """
    compute = method(model, "Trainer._compute_loss", f"model={describe(model)}")
    return compute(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training)


def unscale_loss(loss):
    """Returns a replica's `loss` times the replicas in sync, as Keras logs it.

    Calls `keras.src.losses.loss.unscale_loss_for_distribution(loss)`
    (Keras 3.8-3.15): Keras' losses divide by the replicas under a strategy, so
    that their gradients add up over the replicas.

    Raises:
        PrivateNameError: when Keras has no such function.
    """
    name = "keras.src.losses.loss.unscale_loss_for_distribution"
    check(name)
    try:
        module = importlib.import_module("keras.src.losses.loss")
    except ImportError:
        raise missing(name, "the Keras installation") from None
    return method(module, name, "the Keras installation")(loss)
