"""What the tests share: helpers they import, and the scripts they run as processes.

Tests import these one way, `from support import workers` (pytest puts `tests/` on
the path). The scripts run as modules, `python -m support.mw_equivalence ...`, so
their own `from support import ...` works too: `conftest.py` puts `tests/` on
`PYTHONPATH` for every process a test starts. By hand, from the repository root:

    PYTHONPATH=tests python -m support.planner_memory

Helpers: `workers` (start processes; the cluster variables the session keeps clean),
`main_job` (the `done:` line of `python -m mgpu_tf.train`), `compare` (trained
weights against a reference), `models` (small Keras models), `sharding_problem`,
`validation_problem` (a fit validated on `shard_dataset` data, and its one-device
reference), `matrix_namespace`, `planner_models`, `combinations` (the cells of the
combination matrix) and `combinations_run` (training one cell, and its one-device reference).
Scripts: `mw_*` (multi-worker; `mw_combinations` trains the matrix's multi-worker cells),
`sharding_worker`, `calibrate_job`, `steps_job`, `planner_memory`, `planner_step_time`,
`ray_recipe` (a Ray Train script on a local Ray).
"""
