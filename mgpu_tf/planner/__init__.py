"""The planner: which parallelism a model wants, before any hardware is booked.

`memory` adds up what each device holds (parameters, gradients, optimizer slots,
traced activations), `interconnect` names the links and their default figures,
`timing` measures a step's compute here, and `recommend` ranks the options by
the seed's rules (`plan`, and the choice `make_strategy("auto", model=...)` makes);
`cost_model` predicts an all-reduce's time, and `bench/` measures on this machine
what the predictions say (`mgpu-tf bench`).
The names load on first use, so `mgpu-tf plan --help` answers without TensorFlow.
"""

from mgpu_tf import lazy_exports

_EXPORTS = {
    "mgpu_tf.planner.memory": "Footprint format_size parse_size",
    "mgpu_tf.planner.recommend": "Option Plan PlanError plan",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
