"""The scaling benchmark behind `mgpu-tf bench`: examples/s against devices and workers.

Design: docs/design.md#the-scaling-benchmark
"""

import dataclasses

from mgpu_tf.cli import bench_job as job
from mgpu_tf.planner.bench import report, runner
from mgpu_tf.planner.bench.settings import ModelSpec

__all__ = ["measure", "run_benchmark"]


def measure(setting, *, spec=ModelSpec(), steps=30, timeout=600):
    """Runs one `Setting` in fresh processes for `steps` timed steps; returns its figures.

    The figures are `job.train_and_time`'s, worker 0's for workers. Raises
    `FreshProcessError` when the run fails or outlasts `timeout`.
    """
    payload = {"setting": dataclasses.asdict(setting), "spec": dataclasses.asdict(spec),
               "steps": steps}
    return runner.run_in_fresh_process(
        job.train_and_time, payload, workers=setting.count if setting.mode == "workers" else 1,
        threads=setting.threads, timeout=timeout, label=f"setting {setting.name!r}")


def _progress(done, total, label, stream):
    width = 30
    filled = width * done // total
    stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label:<40.40}")
    stream.flush()


def run_benchmark(settings, *, rounds=3, steps=30, spec=ModelSpec(), progress=None):
    """Measures every setting `rounds` times, alternating; returns `report.summarise`'s rows.

    `progress` is a stream for a progress bar, or None.
    """
    runs = {s.name: [] for s in settings}
    total, done = rounds * len(settings), 0
    for _ in range(rounds):
        for setting in settings:
            if progress is not None:
                _progress(done, total, setting.name, progress)
            runs[setting.name].append(measure(setting, spec=spec, steps=steps))
            done += 1
    if progress is not None:
        _progress(done, total, "done", progress)
        progress.write("\n")
    return report.summarise(settings, runs)
