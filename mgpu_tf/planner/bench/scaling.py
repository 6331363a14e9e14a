"""The scaling benchmark behind `mgpu-tf bench`: examples/s against devices and workers.

Design: docs/design.md#the-scaling-benchmark
"""

import dataclasses

from mgpu_tf.planner.bench import job, report, runner
from mgpu_tf.planner.bench.settings import ModelSpec

__all__ = ["measure", "run_benchmark"]


def measure(setting, *, spec=ModelSpec(), steps=30, timeout=600):
    """Runs one setting in fresh processes; returns its figures (worker 0's for workers).

    Args:
        setting: a `Setting`.
        spec: the model. Defaults to `ModelSpec()`.
        steps: timed steps. Defaults to `30`.
        timeout: seconds before the run is stopped. Defaults to `600`.

    Returns:
        The dictionary `job.train_and_time` returns.

    Raises:
        FreshProcessError: when the run fails or runs out of time.
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
    """Measures every setting `rounds` times, alternating; returns the summary rows.

    Args:
        settings: `Setting`s, e.g. from `default_settings`.
        rounds: runs of each setting. Defaults to `3`.
        steps: timed steps per run. Defaults to `30`.
        spec: the model. Defaults to `ModelSpec()`.
        progress: a stream for a progress bar, or None for none.

    Returns:
        A list of dictionaries, one per setting (see `report.summarise`).
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
