"""Measures on this machine what the planner's cost model predicts (`mgpu-tf bench`).

`settings` names the model and the ways to run it, `job` is what each fresh
process does (build, train, time, time the collectives), `runner` runs a
function in a fresh process and hands back its JSON result (the benchmarks
in `benchmarks/` use it too), `scaling` measures the settings in alternating
rounds and `report` summarises them into a table, a JSON file and a plot.
The names load on first use, so `mgpu-tf bench --help` answers without TensorFlow.
"""

from mgpu_tf import lazy_exports

_EXPORTS = {
    "mgpu_tf.planner.bench.settings": "ModelSpec Setting default_settings switched",
    "mgpu_tf.planner.bench.runner": "FreshProcessError run_in_fresh_process",
    "mgpu_tf.planner.bench.scaling": "measure run_benchmark",
    "mgpu_tf.planner.bench.report": "summarise format_table write_json write_plot",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
