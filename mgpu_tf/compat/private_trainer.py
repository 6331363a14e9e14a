"""The private names of Keras' TensorFlow trainer that mgpu_tf touches, each behind one accessor.

Keras' TensorFlow trainer (`keras/src/backend/tensorflow/trainer.py`) is where the
fixes for Keras under `tf.distribute` wrap or replace Keras' code. Like those of
`mgpu_tf.compat.private`, each accessor names the private name it touches and the
releases it is known for (`versions.KNOWN`): outside them it logs once and tries;
when the name is gone it raises `PrivateNameError`, saying what to install.
"""

import importlib

from mgpu_tf.compat.versions import PrivateNameError, attribute, check, describe, method, missing

__all__ = [
    "PrivateNameError",
    "is_multi_worker",
    "keras_trainer",
    "model_strategy",
    "set_trainer_function",
    "trainer_function",
]

_TRAINER_FUNCTIONS = ("TensorFlowTrainer._maybe_symbolic_build", "reduce_per_replica",
                      "_collective_all_reduce_multi_worker")


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

    Touches `TensorFlowTrainer._maybe_symbolic_build(self, iterator=None,
    data_batch=None)` (Keras 3.5-3.15), `reduce_per_replica(values, strategy,
    reduction)` and `_collective_all_reduce_multi_worker(strategy)` (Keras 3.0-3.15)
    of `keras.src.backend.tensorflow.trainer`.

    Args:
        name: `"TensorFlowTrainer._maybe_symbolic_build"`, `"reduce_per_replica"` or
            `"_collective_all_reduce_multi_worker"`.

    Raises:
        ValueError: for another `name`.
        PrivateNameError: when the trainer has no such function.
    """
    owner, known = _trainer_owner(name)
    return method(owner, known, "the Keras installation")


def set_trainer_function(name, function):
    """Puts `function` in place of the one `trainer_function(name)` returns.

    Keras' trainer calls `reduce_per_replica` by its module-level name and
    `_maybe_symbolic_build` through the model, so the replacement is what runs.

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
