"""Time to train: what a user waits for, the whole fit, with adaptive shards and epoch starts.

Every figure is wall clock, as the main job's `done:` line gives it (`examples_per_sec` from
the second epoch's start to the end of `fit`, and `fit_seconds`, the whole fit), with the
steps' own time beside it where it explains the difference. Side by side, in alternating
rounds, on this machine:

1. Epoch boundaries (`epoch_job.py`, the main job's model and data with every step timed)
   under default, mirrored on 2 logical devices and 2 workers: an iterator per epoch and a
   shuffle buffer (`--per_epoch --buffer`, as before `mgpu_tf.data.stream` and the index
   shuffle), an iterator per epoch shuffled by index (`--per_epoch`), and one stream of
   epochs shuffled by index (the default): the wall clock against the steps alone, and
   each epoch's first step against the median step.
2. Two identical workers (each on its own core): even against adaptive shares.
3. One worker at half speed for the whole run (its core shared with a busy process):
   even against adaptive shares, and against fixed weights (`--fixed 9,7`): what the
   best shares can give in that setting.
4. A slowdown that starts mid-run: each epoch's wall clock (the chief's `Epoch k/N`
   lines as they arrive), adaptive against even.

Usage: python benchmarks/bench_time_to_train.py [--rounds 3] [--only boundaries,identical,...]
       [--hogs 1] [--fixed 9,7 --fixed 10,6]
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

from mgpu_tf.cluster import launcher

_HERE = os.path.dirname(os.path.abspath(__file__))
_BASE = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""}
_DONE = re.compile(r"examples_per_sec=([0-9.]+) steps_examples_per_sec=([0-9.]+) "
                   r"fit_seconds=([0-9.]+)")
_EPOCH = re.compile(r"Epoch (\d+)/")
_SCENARIOS = ("boundaries", "identical", "half", "midrun")


def _hogs(core, count):
    return [subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c",
                              "while True: pass"]) for _ in range(count)]


def _stop(*processes):
    for process in processes:
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()


def _workers(commands, on_line=None, env=None):
    """Runs one command per worker (worker i on core i); the chief's output lines."""
    configs = launcher.worker_tf_configs(len(commands))
    processes = [subprocess.Popen(
        ["taskset", "-c", str(i), *command],
        env=dict(os.environ, **_BASE, **(env or {}), TF_CONFIG=json.dumps(configs[i])),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i, command in enumerate(commands)]
    lines = []
    try:
        for p in processes[1:]:
            threading.Thread(target=p.stdout.read, daemon=True).start()
        for line in processes[0].stdout:
            for part in line.replace("\r", "\n").split("\n"):
                lines.append((time.perf_counter(), part))
                if on_line:
                    on_line(part)
        codes = [p.wait() for p in processes]
    finally:
        for p in processes:
            _stop(p)
    if any(codes):
        raise RuntimeError(f"a worker failed ({codes}): {''.join(t for _, t in lines[-20:])}")
    return lines


# ------------------------------------------------------------------ epoch boundaries


_VARIANTS = {"per epoch, buffer": ["--per_epoch", "--buffer"], "per epoch, index": ["--per_epoch"],
             "stream, index": []}


def _epoch_job(kind, variant, args):
    command = [sys.executable, os.path.join(_HERE, "epoch_job.py"), kind,
               "2" if kind == "mirrored" else "1", str(args.examples), str(args.batch),
               str(args.epochs), *_VARIANTS[variant]]
    if kind == "multi_worker":
        lines = [text for _, text in _workers([command, command])]
    else:
        lines = subprocess.run(command, env=dict(os.environ, **_BASE), capture_output=True,
                               text=True, check=True).stdout.splitlines()
    found = [json.loads(line[len("steps: "):]) for line in lines if line.startswith("steps: ")]
    return found[-1]


def _boundary_figures(run, batch):
    """Wall-clock and steps-only rates from epoch 2 on, and first step over median."""
    examples = run["examples"] * (len(run["epochs"]) - 1)
    wall = run["fit"] - run["begins"][1]
    steps = sum(sum(s) for s in run["steps"][1:])
    firsts = [s[0] / statistics.median(s[1:]) for s in run["steps"][1:]]
    return {"wall": examples / wall, "steps": examples / steps, "fit": run["fit"],
            "first": statistics.median(firsts), "first_max": max(firsts)}


def boundaries(args):
    for kind in ("default", "mirrored", "multi_worker"):
        rows = {variant: [] for variant in _VARIANTS}
        for _ in range(args.rounds):
            for variant in _VARIANTS:
                rows[variant].append(_boundary_figures(_epoch_job(kind, variant, args),
                                                       args.batch))
        for variant, runs in rows.items():
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(f"boundaries {kind:12s} {variant:17s} wall {med['wall']:7.0f}/s steps "
                  f"{med['steps']:7.0f}/s wall/steps {med['wall'] / med['steps']:.3f}  fit "
                  f"{med['fit']:.2f} s  first step / median {med['first']:.2f} (max "
                  f"{med['first_max']:.2f})", flush=True)
        base = rows["per epoch, buffer"]
        for variant in ("per epoch, index", "stream, index"):
            wall = statistics.median(a["wall"] / b["wall"] for a, b in zip(rows[variant], base))
            fit = statistics.median(b["fit"] / a["fit"] for a, b in zip(rows[variant], base))
            print(f"boundaries {kind:12s} {variant} / per epoch, buffer: wall clock (epoch 2 "
                  f"on) {wall:.3f}, whole fit {fit:.3f}", flush=True)


# ------------------------------------------------------------------ adaptive pairs


def _main_job(args, shares, examples, epochs, *extra):
    """The main job's command; `shares` even, adaptive, or fixed weights such as `9,7`."""
    fixed = shares not in ("even", "adaptive")
    return [sys.executable, "-m", "mgpu_tf.train", "--strategy=multi_worker",
            "--dataset=synthetic", f"--synthetic_examples={examples}",
            f"--global_batch_size={args.batch}", f"--width={args.width}", f"--epochs={epochs}",
            f"--shard_weights={'deployment' if fixed else shares}", *extra]


def pair(args, shares, examples, epochs, hog_from=None, *extra):
    """`(examples_per_sec, steps_examples_per_sec, fit_seconds, [epoch seconds], lines)`."""
    busy = {"processes": _hogs(1, args.hogs) if hog_from == 0 else []}

    def on_line(part):
        epoch = _EPOCH.search(part)
        if (epoch and hog_from and int(epoch.group(1)) == hog_from + 1
                and not busy["processes"]):
            busy["processes"] = _hogs(1, args.hogs)

    try:
        command = _main_job(args, shares, examples, epochs, *extra)
        fixed = shares not in ("even", "adaptive")
        lines = _workers([command, command], on_line,
                         {"MGPU_TF_SHARD_WEIGHTS": shares} if fixed else None)
    finally:
        _stop(*busy["processes"])
    headers = [t for t, text in lines if _EPOCH.match(text)]
    done = [(t, _DONE.search(text)) for t, text in lines if text.startswith("done:")]
    end, match = done[-1]
    # An epoch ends when the next one's header arrives; the last when evaluation starts,
    # which the done line follows closely.
    epoch_seconds = [b - a for a, b in zip(headers, headers[1:] + [end])]
    return (*(float(v) for v in match.groups()), epoch_seconds, [text for _, text in lines])


def speeds(args, examples, hog_from):
    """Worker 1's speed over worker 0's, by the monitor's compute figures, even shares."""
    lines = pair(args, "even", examples, args.epochs, hog_from, "--monitor")[4]
    rows = [text.split() for text in lines if re.match(r"\s+[01]\s+[0-9.]+\s+[0-9.]+\s", text)]
    computes = [float(row[3]) for row in rows[-2:]]
    return computes[0] / computes[1]


def compare(args, label, examples, epochs, hog_from=None, fixed=()):
    """Even, adaptive and each of `fixed` (weights such as `9,7`), side by side in rounds."""
    kinds = ("even", "adaptive", *fixed)
    runs = {kind: [] for kind in kinds}
    for r in range(args.rounds):
        # Each goes first in turn: the first run of a round may meet another load.
        for shares in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
            run = pair(args, shares, examples, epochs, hog_from)
            runs[shares].append(run)
            print(f"  {label} round {r} {shares:8s}: wall {run[0]:8.0f}/s steps {run[1]:8.0f}/s "
                  f"fit {run[2]:.2f} s epochs {[round(s, 2) for s in run[3]]}", flush=True)
            moves = [t.split(": batch sizes ")[1] for t in run[4] if ": batch sizes " in t
                     and t.startswith("epoch ")]
            if moves:
                print(f"    shares moved: {', '.join(moves)}", flush=True)
    for kind in kinds[1:]:
        for i, name in ((0, "wall clock (epoch 2 on)"), (2, "whole fit")):
            ratios = [(a[i] / e[i]) if i == 0 else (e[i] / a[i])
                      for a, e in zip(runs[kind], runs["even"])]
            print(f"{label}: {kind} / even, {name}: {statistics.median(ratios):.3f} "
                  f"(rounds {[round(x, 3) for x in ratios]})", flush=True)
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--examples", type=int, default=65536)
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--only", default=",".join(_SCENARIOS))
    parser.add_argument("--hogs", type=int, default=1,
                        help="busy processes on worker 1's core (half speed, slowdown)")
    parser.add_argument("--fixed", action="append", default=[],
                        help="fixed weights run beside even and adaptive in `half`, e.g. 9,7")
    args = parser.parse_args()
    only = args.only.split(",")
    if "boundaries" in only:
        boundaries(args)
    if "identical" in only:
        compare(args, "two identical workers", 16384, args.epochs)
    if "half" in only:
        label = f"worker 1 beside {args.hogs} busy process(es)"
        compare(args, label, args.examples, args.epochs, hog_from=0, fixed=args.fixed)
        print(f"{label}: worker 1's speed / worker 0's, by the monitor's compute (even "
              f"shares): {speeds(args, args.examples, 0):.3f}", flush=True)
    if "midrun" in only:
        runs = compare(args, "slowdown from epoch 5", args.examples, 10, hog_from=4)
        for name, rs in runs.items():
            per_epoch = [statistics.median(e) for e in zip(*(r[3] for r in rs))]
            print(f"slowdown from epoch 5, {name}: median epoch seconds "
                  f"{[round(s, 2) for s in per_epoch]}", flush=True)


if __name__ == "__main__":
    main()
