"""Resident memory and threads per cross-worker all-reduce: eager, traced, traced keeping keys.

Two workers (`make_strategy("multi_worker", transport="tensorflow")`) each call one kind of
all-reduce `--calls` times and read their resident memory (`VmRSS`) and thread count after
every tenth of them; a line fitted to the memory gives the bytes per call. Kinds: `eager`
(`strategy.reduce` outside any function, as Keras reads a metric's result), `traced` (in a
`tf.function`: TensorFlow takes a new instance key per call) and `kept` (the same function in
`collective_keys.keeping_keys`: one key). With `--timeout_seconds`, the workers read both
again after waiting that long and 2 seconds more.

    python benchmarks/bench_collective_keys.py --calls 2000
    python benchmarks/bench_collective_keys.py --calls 4000 --timeout_seconds 3 --kinds traced
"""

import argparse
import gc
import json
import sys
import time

import numpy as np

import soak_worker
import worker_group

KINDS = ("eager", "traced", "kept")


def _worker(payload):
    import tensorflow as tf

    import mgpu_tf
    from mgpu_tf.compat import collective_keys

    strategy = mgpu_tf.make_strategy("multi_worker", transport="tensorflow",
                                     timeout_seconds=payload["timeout"])

    def reduce():
        value = strategy.run(lambda: tf.constant(1.0))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

    call = {"eager": reduce, "traced": tf.function(reduce),
            "kept": tf.function(collective_keys.keeping_keys(reduce, strategy))}[payload["kind"]]
    calls, every = payload["calls"], max(1, payload["calls"] // 10)
    for _ in range(20):  # warm-up: tracing, first allocations
        call()
    gc.collect()
    start, readings = soak_worker.resident_bytes(), []
    for i in range(1, calls + 1):
        call()
        if i % every == 0:
            gc.collect()
            readings.append((i, soak_worker.resident_bytes() - start))
    figures = {"bytes_per_call": float(np.polyfit(*np.array(readings, "float64").T, 1)[0]),
               "kb": readings[-1][1] / 1024, "threads": soak_worker.thread_count()}
    if payload["timeout"]:
        time.sleep(payload["timeout"] + 2)
        gc.collect()
        figures.update(kb_later=(soak_worker.resident_bytes() - start) / 1024,
                       threads_later=soak_worker.thread_count())
    print("figures: " + json.dumps(figures), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--timeout_seconds", type=float, default=None)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return _worker(json.loads(args.worker))
    later = args.timeout_seconds is not None
    print(f"{'kind':>7}{'calls':>7}{'bytes per call':>16}{'growth KB':>11}{'threads':>9}"
          + (f"{'then: KB':>10}{'threads':>9}" if later else ""))
    for kind in args.kinds.split(","):
        figures = worker_group.run(__file__, {"kind": kind, "calls": args.calls,
                                              "timeout": args.timeout_seconds}, 2)
        print(f"{kind:>7}{args.calls:>7}{figures['bytes_per_call']:>16.0f}{figures['kb']:>11.0f}"
              f"{figures['threads']:>9}"
              + (f"{figures['kb_later']:>10.0f}{figures['threads_later']:>9}" if later else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
