"""Measures on this machine what the planner's cost model predicts (`mgpu-tf bench`).

`settings` names the model and the ways to run it, `runner` runs a function in a
fresh process and hands back its JSON result (the benchmarks in `benchmarks/` use it
too), `report` summarises the runs. `mgpu_tf.cli.bench_job` and `bench_scaling`, above
the strategies, train. The names load on first use.
"""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
