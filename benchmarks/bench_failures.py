"""Failure figures: time to detect a lost worker, and work redone after a restart.

1. Two workers train (failure_worker.py); worker 1 SIGKILLs itself at a chosen
   step. Measured: seconds from its death until the survivor names the lost worker
   (WorkerLostError) and until it has stopped, for several `timeout_seconds`.
2. The same kill under `mgpu-tf launch --max_restarts 1` with BackupAndRestore:
   steps done twice, steps never done, and the largest weight difference from an
   uninterrupted run.

    python benchmarks/bench_failures.py --trials 3
"""

import argparse
import io
import os
import pathlib
import statistics
import sys
import tempfile

import numpy as np

import failure_worker
from mgpu_tf.cluster import launcher

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
STEPS_PER_EPOCH, EPOCHS = failure_worker.STEPS_PER_EPOCH, failure_worker.EPOCHS


def _detection(timeout_seconds, out):
    env = dict(ENV, MGPU_TF_BENCH_TIMEOUT=str(timeout_seconds))
    run = failure_worker.run_with_a_kill(out, env, death_timeout=300, stop_timeout=300)
    return run.named, run.stopped


def _restart(root):
    clean, restarted = root / "clean", root / "restarted"
    for out, kill, restarts in ((clean, [], 0), (restarted, ["1", "1", "3"], 1)):
        code = launcher.launch([sys.executable, failure_worker.__file__, str(out), *kill], 2,
                               env=ENV, max_restarts=restarts, output=io.StringIO(),
                               grace_seconds=3)
        if code:
            raise RuntimeError(f"training failed with exit code {code}")
    done = [tuple(map(int, line.split()[1:]))
            for line in (restarted / "steps-0.txt").read_text().splitlines()]
    expected = {(e, b) for e in range(EPOCHS) for b in range(STEPS_PER_EPOCH)}
    repeated = len(done) - len(set(done))
    lost = len(expected - set(done))
    difference = max(float(np.max(np.abs(a - b) / (np.abs(a) + 1e-12)))
                     for a, b in zip(failure_worker.weights(clean / "final.npz"),
                                     failure_worker.weights(restarted / "final.npz")))
    return repeated, lost, difference


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--timeouts", default="5,10")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        root = pathlib.Path(directory)
        print(f"{'timeout_seconds':>16}{'trial':>7}{'named after s':>15}{'stopped after s':>17}")
        for timeout in [float(t) for t in args.timeouts.split(",")]:
            seconds = []
            for trial in range(args.trials):
                named, stopped = _detection(timeout, root / f"d{timeout}-{trial}")
                seconds.append(stopped)
                shown = "never" if named is None else f"{named:.1f}"
                print(f"{timeout:>16.0f}{trial:>7}{shown:>15}{stopped:>17.1f}", flush=True)
            print(f"{timeout:>16.0f}{'median':>7}{'':>15}{statistics.median(seconds):>17.1f}")
        repeated, lost, difference = _restart(root / "restart")
        print(f"restart after a kill at epoch 1, step 3 of {STEPS_PER_EPOCH}: "
              f"steps repeated={repeated} steps lost={lost} "
              f"max relative weight difference={difference:.2e}")


if __name__ == "__main__":
    main()
