"""Keras' metric reads and resets between steps under several workers, each one traced function.

Between steps Keras reads and resets its metrics eagerly; a metric's variables then sum over
the workers in an eager collective per variable, and TensorFlow keeps a record of each eager
collective's key for the life of the process (a loss alone: 4 an epoch, about 8 KB).
Traced once, with its keys taken once, each runs the same collectives at every call.

Design: docs/design.md#metric-reads-between-steps
"""

import functools

from mgpu_tf.compat import collective_keys, private_trainer, versions

__all__ = ["install", "installed"]

_MARK = "_mgpu_tf_metric_reads"
# Where a model keeps its traced reads: {method name: (its metrics' variables, function)}.
_TRACED = "_mgpu_tf_traced_metric_reads"
# Keras releases whose get_metrics_result returns Python numbers (pythonify_logs).
_PYTHON_NUMBERS = ((3, 8), (3, 13))


def installed():
    """True when Keras' `Trainer.get_metrics_result` and `reset_metrics` run traced."""
    return private_trainer.patched_by("Trainer.reset_metrics", _MARK)


def install():
    """Patches Keras' `Trainer.get_metrics_result` and `Trainer.reset_metrics`; again changes
    nothing. Each runs as before unless eager, on a model of a multi-worker strategy."""
    import keras

    if installed():
        return
    numbers = versions.release_in(keras.__version__, *_PYTHON_NUMBERS, argument="keras_version")
    for name, finish in (("Trainer.get_metrics_result", _numbers if numbers else None),
                         ("Trainer.reset_metrics", _nothing)):
        private_trainer.set_trainer_function(
            name, _traced_between_steps(name, private_trainer.trainer_function(name), finish))


def _numbers(results):
    """The results as Keras' `pythonify_logs` gives them: by name, floats where they convert."""
    out = {}
    for name, value in sorted(results.items()):
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            out[name] = value
    return out


def _nothing(results):
    """What Keras' `reset_metrics` returns: nothing (its traced function returns `{}`)."""
    del results


def _traced_between_steps(name, original, finish):
    import tensorflow as tf

    @functools.wraps(original)
    def method(model):
        strategy = private_trainer.model_strategy(model)
        if (not tf.executing_eagerly() or strategy is None
                or not private_trainer.is_multi_worker(strategy)):
            return original(model)
        variables = tuple(id(v) for m in model.metrics for v in m.variables)
        traced = getattr(model, _TRACED, None)
        if traced is None:
            traced = {}
            object.__setattr__(model, _TRACED, traced)
        if traced.get(name, (None,))[0] != variables:
            # Both workers build their metrics at the same step, so they trace together.
            def run():
                with strategy.scope():
                    out = original(model)
                return {} if out is None else out

            traced[name] = (variables, tf.function(collective_keys.keeping_keys(run, strategy)))
        out = traced[name][1]()
        return finish(out) if finish else out

    setattr(method, _MARK, True)
    return method
