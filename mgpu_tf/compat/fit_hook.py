"""Keras' `fit`, patched once on its trainer: it asks the model's kind for the callbacks
to run (`fit_callbacks`), to `prepare_fit` before the first step and to `finish_fit` after
the last, however `fit` ends. Data of `shard_dataset` adds its epoch stream's `follower()`.

Design: docs/design.md#adaptive-shard-weights
"""

import functools
import inspect

from mgpu_tf.base import kind as kind_lib
from mgpu_tf.compat import private_trainer

__all__ = ["install", "installed"]

_MARK = "_mgpu_tf_fit_hook"


def installed():
    """True when Keras' `TensorFlowTrainer.fit` runs the hook."""
    return private_trainer.patched_by("TensorFlowTrainer.fit", _MARK)


def install():
    """Patches Keras' `TensorFlowTrainer.fit`; again changes nothing."""
    if installed():
        return
    original = private_trainer.trainer_function("TensorFlowTrainer.fit")
    signature = inspect.signature(original)

    @functools.wraps(original)
    def fit(model, *args, **kwargs):
        bound = signature.bind_partial(model, *args, **kwargs)
        arguments = bound.arguments
        kind = kind_lib.kind_of_model(model)
        data, given = arguments.get("x"), arguments.get("callbacks")
        callbacks = kind.fit_callbacks(_with_follower(data, given))
        if callbacks is not given:
            arguments["callbacks"] = callbacks
            args, kwargs = bound.args[1:], bound.kwargs
        kind.prepare_fit(data, given,
                         steps_per_execution=model.steps_per_execution,
                         model=model, class_weight=arguments.get("class_weight"))
        try:
            return original(model, *args, **kwargs)
        finally:
            kind.finish_fit(data)

    setattr(fit, _MARK, True)
    private_trainer.set_trainer_function("TensorFlowTrainer.fit", fit)


def _with_follower(data, callbacks):
    """`callbacks` (a list, tuple or None; a `CallbackList` runs as given) and last the
    follower of `data`'s epoch stream, when it comes from `shard_dataset`."""
    stream = getattr(type(data), "epoch_stream", None)
    if stream is None or not isinstance(callbacks, (list, tuple, type(None))):
        return callbacks
    return [*(callbacks or ()), stream.follower()]
