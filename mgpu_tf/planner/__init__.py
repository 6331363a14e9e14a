"""The planner: which parallelism a model wants, before any hardware is booked.

`memory` adds up what each device holds (parameters, gradients, optimizer slots,
traced activations), `interconnect` names the links and their default figures,
`timing` measures a step's compute here, and `recommend` ranks the options by
the seed's rules (`plan`, and the choice `make_strategy("auto", model=...)` makes).
The names load on first use, so `mgpu-tf plan --help` answers without TensorFlow.
"""

import importlib

_EXPORTS = {
    "Footprint": "mgpu_tf.planner.memory",
    "format_size": "mgpu_tf.planner.memory",
    "parse_size": "mgpu_tf.planner.memory",
    "Option": "mgpu_tf.planner.recommend",
    "Plan": "mgpu_tf.planner.recommend",
    "PlanError": "mgpu_tf.planner.recommend",
    "plan": "mgpu_tf.planner.recommend",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mgpu_tf.planner' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
