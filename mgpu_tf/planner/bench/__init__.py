"""Measures on this machine what the planner's cost model predicts (`mgpu-tf bench`).

`settings` names the model and the ways to run it, `job` is what each fresh
process does (build, train, time, time the collectives), `runner` runs a
function in a fresh process and hands back its JSON result (the benchmarks
in `benchmarks/` use it too), `scaling` measures the settings in alternating
rounds and `report` summarises them into a table, a JSON file and a plot.
The names load on first use, so `mgpu-tf bench --help` answers without TensorFlow.
"""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
