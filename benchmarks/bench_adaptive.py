"""Adaptive shards against equal and calibrated shares, with one worker at half speed.

Two local workers of the main job (`python -m mgpu_tf.train --strategy=multi_worker`,
synthetic data), each pinned to its own core with `taskset`. Worker 1's core is
shared with a busy process, so it runs at about half speed, and its slowness grows
with the examples it gets. Compared, in alternating rounds:

- `equal`: even shares;
- `static`: the weights `mgpu-tf calibrate --speeds` proposes from each worker's
  speed measured alone (`MGPU_TF_SHARD_WEIGHTS`);
- `adaptive`: `--shard_weights=adaptive`;

against the ideal, the sum of the two workers' speeds measured alone in the same
conditions, and against the ideal with communication: the step of that sum's speed
plus what the same pair spends communicating, measured at full speed (even shares,
no busy process), which no split of the examples removes. A second scenario starts
the busy process when the chief begins epoch `--change_epoch` + 1: the slowdown
starts mid-run. Every run (alone too) has `--monitor`, whose per-epoch step time
gives each epoch's examples/s, so what an epoch's start costs (its iterator, the
shuffle buffer) counts nowhere; a run's settled figure is the median of its last
`--settled` epochs. Also timed: the monitor's own cost (a run without it against
one with it, on one core).

Usage: python benchmarks/bench_adaptive.py [--rounds 2] [--epochs 10]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

from mgpu_tf.cluster import calibrate, launcher

_STEP = re.compile(r"step_ms: ([0-9.e+-]+)")
_EPOCH = re.compile(r"Epoch (\d+)/")
_DONE = re.compile(r"examples_per_sec=([0-9.]+)")
_BASE = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""}


def _job(args, *extra):
    return [sys.executable, "-m", "mgpu_tf.train", "--dataset=synthetic",
            f"--synthetic_examples={args.examples}", f"--global_batch_size={args.batch}",
            f"--width={args.width}", *extra]


def _hog(core):
    return subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c",
                             "while True: pass"])


def _stop(process):
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()


def _epoch_speeds(lines, batch):
    """Examples/s of each epoch, from the monitor's `step_ms` in Keras' epoch lines."""
    speeds = []
    for line in lines:
        for part in line.replace("\r", "\n").split("\n"):
            if "compute_ms" in part and _STEP.search(part):
                speeds.append(batch * 1000.0 / float(_STEP.findall(part)[-1]))
    return speeds


def alone(args, core, hog):
    """Examples/s of one worker alone on `core` (mirrored on its one CPU), timed as a pair is.

    Both are the monitor's step times after the first epoch, so neither counts what an
    epoch's start costs (making its iterator, filling the shuffle buffer).
    """
    busy = _hog(core) if hog else None
    try:
        out = subprocess.run(["taskset", "-c", str(core), *_job(
            args, "--strategy=mirrored", f"--epochs={args.alone_epochs}", "--monitor")],
            env=dict(os.environ, **_BASE), capture_output=True, text=True, check=True).stdout
    finally:
        _stop(busy)
    return statistics.median(_epoch_speeds(out.splitlines(), args.batch)[1:])


def pair(args, weights, *, hog_from=None, monitor=True):
    """Per-epoch examples/s of a two-worker run; the hog starts at epoch `hog_from` (0: always)."""
    configs = launcher.worker_tf_configs(2)
    env = dict(os.environ, **_BASE)
    extra = [f"--epochs={args.epochs}", "--strategy=multi_worker"]
    if weights == "adaptive":
        extra.append("--shard_weights=adaptive")
    elif weights == "equal":
        extra.append("--shard_weights=even")
    else:
        env["MGPU_TF_SHARD_WEIGHTS"] = ",".join(f"{w:g}" for w in weights)
    if monitor:
        extra.append("--monitor")
    busy, processes, steps, done = None, [], [], None
    try:
        busy = _hog(1) if hog_from == 0 else None
        processes = [subprocess.Popen(
            ["taskset", "-c", str(i), *_job(args, *extra)],
            env=dict(env, TF_CONFIG=json.dumps(configs[i])), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True) for i in range(2)]
        threading.Thread(target=processes[1].stdout.read, daemon=True).start()
        for line in processes[0].stdout:
            steps += _epoch_speeds([line], args.batch)
            for part in line.replace("\r", "\n").split("\n"):
                epoch = _EPOCH.search(part)
                if epoch and hog_from and int(epoch.group(1)) == hog_from + 1 and busy is None:
                    busy = _hog(1)
                if part.startswith("monitor cost"):
                    print(f"    chief: {part.strip()}", flush=True)
                if part.startswith("done:"):
                    done = float(_DONE.findall(part)[-1])
        for p in processes:
            p.wait()
    finally:
        _stop(busy)
        for p in processes:
            _stop(p)
    return steps, done


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--alone_epochs", type=int, default=4)
    parser.add_argument("--settled", type=int, default=3)
    parser.add_argument("--change_epoch", type=int, default=4)
    parser.add_argument("--examples", type=int, default=65536)
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()

    fast = statistics.median(alone(args, 0, False) for _ in range(args.rounds))
    fast1 = statistics.median(alone(args, 1, False) for _ in range(args.rounds))
    slow = statistics.median(alone(args, 1, True) for _ in range(args.rounds))
    static = calibrate.propose_weights([fast, slow])
    ideal = fast + slow
    print(f"alone: worker0 {fast:.0f}/s, worker1 {fast1:.0f}/s, worker1 beside a busy "
          f"process {slow:.0f}/s; static weights {static}; ideal {ideal:.0f}/s", flush=True)

    # The ideal leaves out what the pair spends communicating, which no split of the
    # examples removes: the same pair at full speed (even shares, no busy process)
    # measures it, and the ideal with it is the step of the two speeds' sum plus it.
    balanced = statistics.median(
        statistics.median(pair(args, "equal")[0][-args.settled:]) for _ in range(args.rounds))
    communication = args.batch / balanced - args.batch / (fast + fast1)
    reachable = args.batch / (args.batch / ideal + communication)
    print(f"pair at full speed: {balanced:.0f}/s = {balanced / (fast + fast1):.3f} of the sum "
          f"of its speeds alone; communication {1000 * communication:.1f} ms a step; ideal "
          f"with it {reachable:.0f}/s", flush=True)

    settled = {"equal": [], "static": [], "adaptive": []}
    for r in range(args.rounds):
        for name, weights in (("equal", "equal"), ("static", static),
                              ("adaptive", "adaptive")):
            epochs, _ = pair(args, weights, hog_from=0)
            value = statistics.median(epochs[-args.settled:])
            settled[name].append(value)
            print(f"round {r} {name}: epochs {[round(e) for e in epochs]} settled "
                  f"{value:.0f}/s = {value / ideal:.3f} of ideal", flush=True)
    for name, values in settled.items():
        value = statistics.median(values)
        print(f"half speed, whole run: {name} {value:.0f}/s = {value / ideal:.3f} of ideal, "
              f"{value / reachable:.3f} of the ideal with communication", flush=True)

    for name in ("equal", "adaptive"):
        epochs, _ = pair(args, name, hog_from=args.change_epoch)
        ratios = [e / (balanced if i < args.change_epoch else reachable)
                  for i, e in enumerate(epochs)]
        print(f"slowdown from epoch {args.change_epoch + 1}: {name} epochs / ideal with "
              f"communication {[round(x, 3) for x in ratios]}", flush=True)

    timed = {True: [], False: []}
    for _ in range(args.rounds):
        for monitor in (False, True):
            start = time.perf_counter()
            subprocess.run(["taskset", "-c", "0", *_job(
                args, "--strategy=mirrored", f"--epochs={args.alone_epochs}",
                *(["--monitor"] if monitor else []))], env=dict(os.environ, **_BASE),
                capture_output=True, check=True)
            timed[monitor].append(time.perf_counter() - start)
    with_monitor, without = statistics.median(timed[True]), statistics.median(timed[False])
    print(f"monitor: job {with_monitor:.1f} s with, {without:.1f} s without: "
          f"{with_monitor / without:.3f}", flush=True)


if __name__ == "__main__":
    main()
