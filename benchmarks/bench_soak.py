"""Soak: long training on 2 workers, each worker's memory and step time per epoch.

Two workers (soak_worker.py, under `mgpu_tf.cluster.launcher`) train a tiny model for
`--epochs` epochs with `transport="tcp"`, `shard_optimizer_state=True`, adaptive shares
steered by the TrainingMonitor and one stream of epochs (DataOrder). It prints each epoch's
memory and step time per worker, then, after the warm-up, the growth per 1,000 steps of
the resident set and of what malloc holds (`held`): the median of the slopes fitted in 5
equal windows, which a one-time rise moves in one window only; Python's blocks and the
step-time trend beside them. The check is a bound stated per step and per epoch (records
kept for the user): held memory within `--held_bytes` a step, the resident set (with the
allocator's free space) within `--resident_bytes` a step, each plus `--epoch_bytes` an
epoch.

    python benchmarks/bench_soak.py --epochs 100 --steps_per_epoch 160 --print_every 99

`--kind mirrored` trains in one process on 2 simulated devices instead.
"""

import argparse
import io
import os
import pathlib
import sys
import tempfile

import numpy as np

import soak_worker
from mgpu_tf.cluster import launcher

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
MB = 1.0 / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--warmup", type=float, default=0.2,
                        help="share of the epochs left out of the fitted lines")
    parser.add_argument("--held_bytes", type=float, default=20.0,
                        help="bytes a step may add to what malloc holds")
    parser.add_argument("--resident_bytes", type=float, default=100.0,
                        help="bytes a step may add to the resident set")
    parser.add_argument("--epoch_bytes", type=float, default=2048.0,
                        help="bytes an epoch may add (Keras' History, the monitor's history)")
    parser.add_argument("--leak_bytes", type=int, default=0,
                        help="worker 1 keeps this many bytes per step (a leak to catch)")
    parser.add_argument("--without", default="",
                        help="parts left out: tcp, sharded, adaptive, monitor, stream, timeout;"
                             " toolkit: one process of plain Keras on one device instead")
    parser.add_argument("--print_every", type=int, default=1)
    parser.add_argument("--steps_per_epoch", type=int, default=soak_worker.STEPS_PER_EPOCH)
    parser.add_argument("--kind", choices=["multi_worker", "mirrored"], default="multi_worker")
    args = parser.parse_args()
    out = pathlib.Path(tempfile.mkdtemp(prefix="bench_soak-"))
    log = io.StringIO()
    workers = 1 if "toolkit" in args.without.split(",") or args.kind == "mirrored" else 2
    code = launcher.launch([sys.executable, soak_worker.__file__, str(out), str(args.epochs),
                            str(args.leak_bytes), args.without, str(args.steps_per_epoch),
                            args.kind],
                           workers, env=ENV, output=log,
                           grace_seconds=1)
    if code:
        raise RuntimeError(f"training failed with exit code {code}:\n{log.getvalue()[-3000:]}")
    records = [soak_worker.read(out, i) for i in range(workers)]
    indices = range(workers)
    print(f"{'epoch':>6}{'steps':>7}{'seconds':>8}"
          + "".join(f"{f'rss {i} MB':>10}" for i in indices)
          + "".join(f"{f'threads {i}':>10}" for i in indices)
          + "".join(f"{f'step {i} ms':>11}" for i in indices))
    for rows in zip(*records):
        a = rows[0]
        if a["epoch"] % args.print_every == 0 or a["epoch"] == args.epochs - 1:
            print(f"{a['epoch']:>6}{a['steps']:>7}{a['seconds'] - records[0][0]['seconds']:>8.0f}"
                  + "".join(f"{r['rss'] * MB:>10.1f}" for r in rows)
                  + "".join(f"{r['threads']:>10}" for r in rows)
                  + "".join(f"{1000 * r['step_seconds']:>11.2f}" for r in rows))
    leaks = []
    per_epoch = args.epoch_bytes * 1000.0 / args.steps_per_epoch
    for index, rows in enumerate(records):
        fitted = rows[int(len(rows) * args.warmup):]
        figures = {}
        for key, per_step in (("rss", args.resident_bytes), ("held", args.held_bytes)):
            growth, windows = soak_worker.window_trend(rows, key, warmup=args.warmup, scale=MB)
            line, noise = soak_worker.trend(rows, key, warmup=args.warmup, scale=MB)
            bound = (1000.0 * per_step + per_epoch) * MB
            figures[key] = (growth, windows, line, noise, bound, growth <= bound)
            leaks += [] if growth <= bound else [(index, key)]
        blocks, _ = soak_worker.trend(rows, "python_blocks", warmup=args.warmup)
        times = [r["step_seconds"] * 1000 for r in fitted]
        cpu = [r["step_cpu_seconds"] * 1000 for r in fitted]
        quarter = max(1, len(times) // 4)
        step_trend, _ = soak_worker.trend(rows, "step_seconds", warmup=args.warmup,
                                          scale=1000.0)
        for key, name in (("rss", "resident"), ("held", "held by malloc")):
            growth, windows, line, noise, bound, ok = figures[key]
            print(f"worker {index}: {name} {rows[0][key] * MB:.1f} -> {rows[-1][key] * MB:.1f} MB;"
                  f" after the warm-up ({fitted[-1]['steps'] - fitted[0]['steps']} steps) "
                  f"{growth:+.3f} MB per 1,000 steps, the median of "
                  f"{' '.join(f'{w:+.3f}' for w in windows)} in {len(windows)} windows (one "
                  f"line: {line:+.3f}, scatter {noise:.3f} MB); bound {bound:.3f}: "
                  f"{'ok' if ok else 'GROWS'}")
        anon, file = (soak_worker.trend(rows, key, warmup=args.warmup, scale=MB)[0]
                      for key in ("rss_anon", "rss_file"))
        print(f"worker {index}: of the resident growth, anonymous memory {anon:+.3f} and "
              f"file-backed pages {file:+.3f} MB per 1,000 steps; Python's blocks "
              f"{blocks:+.0f} per 1,000 steps; step time median {np.median(times[:quarter]):.2f} "
              f"ms in the first quarter, {np.median(times[-quarter:]):.2f} ms in the last, trend "
              f"{step_trend:+.3f} ms per 1,000 steps; CPU time a step "
              f"{np.median(cpu[:quarter]):.2f} -> {np.median(cpu[-quarter:]):.2f} ms")
    print(f"steps {records[0][-1]['steps']}; files: {out}")
    return 1 if leaks else 0


if __name__ == "__main__":
    sys.exit(main())
