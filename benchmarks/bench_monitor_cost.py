"""What `TrainingMonitor` costs in wall-clock time: the whole `fit`, with and without it.

Two measurements, each under the default strategy, under `mirrored` on 2 simulated devices
(fit only) and under 2 local workers (`multi_worker`, started by `mgpu-tf launch --workers
2`):

- fit: the main job's model and synthetic data (`mgpu_tf.train`), trained by `fit` in one
  fresh process (one per worker), with and without the monitor in alternating rounds after
  one round that warms up both; each `fit` is timed whole, tracing included, and builds a
  new model, as a job does. The cost is the median `fit` with the monitor over the median
  without, less 1; `own` is the time the monitor counts in its own hooks.
- main job: `python -m mgpu_tf.train --dataset=synthetic` with and without `--monitor`, in
  alternating fresh processes: each process timed whole, and the `examples_per_sec` of its
  `done:` line (which leaves the first epoch out).

On a shared machine a fit's time moves by a few percent from run to run: `paired` is the
median of each round's own cost, which the medians' ratio may miss, and the process' CPU
time (all its threads) follows the monitor's work more closely than the wall clock when
other jobs share the cores.

    python benchmarks/bench_monitor_cost.py --rounds 5 --job_rounds 3
    python benchmarks/bench_monitor_cost.py --rounds 10 --job_rounds 0 --settings default,mirrored
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

from mgpu_tf.planner.bench import runner

_EPOCHS = 3
_BATCH = 64
_SPEED = re.compile(r"^(?:\[\d+\] )?done: .*examples_per_sec=([0-9.]+)", re.M)


def fits(payload):
    """Runs in a fresh process (a worker, for multi_worker): the timed fits, alternating."""
    import mgpu_tf
    from mgpu_tf import callbacks, train

    if payload["strategy"] == "mirrored":
        mgpu_tf.simulate_devices(2)
    strategy = mgpu_tf.make_strategy(payload["strategy"])
    times = {"off": [], "on": [], "own": [], "off_cpu": [], "on_cpu": []}
    for index in range(payload["rounds"] + 1):  # round 0 warms both up and is left out
        for arm in ("off", "on") if index % 2 else ("on", "off"):
            model, data, _, _ = train._prepare(
                strategy, dataset="synthetic", global_batch_size=_BATCH, width=256,
                learning_rate=0.01, synthetic_examples=16384, seed=0, jit_compile="auto",
                steps_per_execution=1)
            fit_callbacks = [callbacks.DataOrder()]
            if arm == "on":
                monitor = callbacks.TrainingMonitor(global_batch_size=_BATCH, print_table=False)
                fit_callbacks.insert(0, monitor)
            start, cpu = time.perf_counter(), time.process_time()
            model.fit(data, epochs=_EPOCHS, verbose=0, callbacks=fit_callbacks, shuffle=False)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            if index:
                times[arm].append(seconds)
                times[f"{arm}_cpu"].append(cpu)
                if arm == "on":
                    times["own"].append(monitor.own_seconds)
    return times


def _percent(on, off):
    return 100.0 * (statistics.median(on) / statistics.median(off) - 1.0)


def _paired(on, off):
    """The median over rounds of each round's cost: a round's two runs saw the same load."""
    return 100.0 * statistics.median(a / b - 1.0 for a, b in zip(on, off))


def _fit_rows(setting, workers, rounds):
    times = runner.run_in_fresh_process(fits, {"strategy": setting, "rounds": rounds},
                                        workers=workers, timeout=1800,
                                        label=f"fits under {setting}")
    rows = zip(times["off"], times["on"], times["own"], times["off_cpu"], times["on_cpu"])
    for index, (off, on, own, off_cpu, on_cpu) in enumerate(rows):
        print(f"fit       {setting:<13}{index:>6}{off:>9.3f}{on:>9.3f}{1000 * own:>9.1f}"
              f"   CPU s {off_cpu:.3f} / {on_cpu:.3f}", flush=True)
    own = 100.0 * statistics.median(times["own"]) / statistics.median(times["on"])
    print(f"fit       {setting:<13}{'median':>6}{statistics.median(times['off']):>9.3f}"
          f"{statistics.median(times['on']):>9.3f}{1000 * statistics.median(times['own']):>9.1f}"
          f"   cost {_percent(times['on'], times['off']):+.2f}% of the fit, paired "
          f"{_paired(times['on'], times['off']):+.2f}% (own hooks {own:.2f}%); CPU time "
          f"{_percent(times['on_cpu'], times['off_cpu']):+.2f}%, paired "
          f"{_paired(times['on_cpu'], times['off_cpu']):+.2f}%", flush=True)


def _job(setting, monitor):
    command = [sys.executable, "-m", "mgpu_tf.train", "--dataset=synthetic",
               f"--epochs={_EPOCHS}", f"--global_batch_size={_BATCH}"]
    if setting == "multi_worker":
        command = [sys.executable, "-m", "mgpu_tf.cli", "launch", "--workers=2", "--",
                   *command, "--strategy=multi_worker"]
    if monitor:
        command.append("--monitor")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - start
    speeds = _SPEED.findall(result.stdout + result.stderr)
    if result.returncode or not speeds:
        raise RuntimeError(f"the main job must end with a done: line. Received: exit code "
                           f"{result.returncode}; {(result.stderr or result.stdout)[-2000:]}")
    return seconds, float(speeds[0])


def _job_rows(setting, rounds):
    runs = {False: [], True: []}
    for index in range(rounds):
        for monitor in (False, True) if index % 2 else (True, False):
            runs[monitor].append(_job(setting, monitor))
        (off, off_speed), (on, on_speed) = runs[False][-1], runs[True][-1]
        print(f"main job  {setting:<13}{index:>6}{off:>9.2f}{on:>9.2f}{'':>9}"
              f"   examples/s {off_speed:.0f} / {on_speed:.0f}", flush=True)
    off = [s for s, _ in runs[False]]
    on = [s for s, _ in runs[True]]
    off_speed = statistics.median(v for _, v in runs[False])
    on_speed = statistics.median(v for _, v in runs[True])
    print(f"main job  {setting:<13}{'median':>6}{statistics.median(off):>9.2f}"
          f"{statistics.median(on):>9.2f}{'':>9}   process {_percent(on, off):+.2f}%, "
          f"paired {_paired(on, off):+.2f}%, "
          f"examples/s {off_speed:.0f} / {on_speed:.0f} ({100 * (off_speed / on_speed - 1):+.2f}%"
          " time per example)", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed fits of each kind")
    parser.add_argument("--job_rounds", type=int, default=3, help="main-job runs of each kind")
    parser.add_argument("--settings", default="default,mirrored,multi_worker")
    args = parser.parse_args()
    print(f"main job's model and synthetic data, {_EPOCHS} epochs, global batch {_BATCH}; "
          "seconds without / with the monitor, and the monitor's own hook time")
    print(f"{'what':<10}{'setting':<13}{'round':>6}{'off s':>9}{'on s':>9}{'own ms':>9}")
    for setting in args.settings.split(","):
        workers = 2 if setting == "multi_worker" else 1
        if args.rounds:
            _fit_rows(setting, workers, args.rounds)
        if args.job_rounds and setting != "mirrored":
            _job_rows(setting, args.job_rounds)


if __name__ == "__main__":
    main()
