"""The tcp ring's all-reduce against the loopback link it runs on, side by side in one run.

Two worker processes form a `mgpu_tf.comm.ring.Ring` over 127.0.0.1 (with a job secret, so
the handshake runs as in a launched job) and all-reduce one float32 buffer of the benchmark
model's gradients (11.7 MB by default). Rounds alternate: worker 0 measures the loopback
bandwidth of plain TCP (`measure_loopback_bandwidth(streams=2)`: two sockets at once in
opposite directions) while worker 1 waits, then both time `repeats` all-reduces.

The ring's rate is the bytes each worker sends per all-reduce, `2 (N - 1) / N` of the buffer,
over its seconds: the figure to set beside the loopback's bytes per second each way.

    python benchmarks/bench_ring.py --rounds 5 --repeats 20
    python benchmarks/bench_ring.py --stamps   # where one all-reduce's time goes
"""

import argparse
import json
import multiprocessing
import os
import statistics
import time

import numpy as np

from mgpu_tf.comm import ring as ring_lib
from mgpu_tf.comm.ring import Ring
from mgpu_tf.planner import cost_model

__all__ = ["main"]

WORKERS = 2
LOOPBACK_BYTES = 64 * 2**20  # each stream's, measure_loopback_bandwidth's default
# The bench model's gradients (784 inputs, 3 Dense layers of 1024, 10 classes): 11.7 MB.
MODEL_VALUES = 784 * 1024 + 2 * 1024 * 1024 + 1024 * 10 + 3 * 1024 + 10


class _StampedRing(Ring):
    """A ring that adds up the seconds its main thread spends sending, waiting and adding."""

    def __init__(self, *args, **kwargs):
        self.stamps = {"send": 0.0, "wait": 0.0, "all": 0.0}
        super().__init__(*args, **kwargs)

    def all_reduce(self, buffer, op=0):
        start = time.perf_counter()
        try:
            return super().all_reduce(buffer, op)
        finally:
            self.stamps["all"] += time.perf_counter() - start

    def _send(self, key, *data):
        start = time.perf_counter()
        Ring._send(self, key, *data)
        self.stamps["send"] += time.perf_counter() - start

    def _take(self, key, nbytes):
        start = time.perf_counter()
        try:
            return Ring._take(self, key, nbytes)
        finally:
            self.stamps["wait"] += time.perf_counter() - start


def _worker(rank, listeners, peers, values, rounds, repeats, results, stamps=False):
    os.environ["MGPU_TF_JOB_SECRET"] = "bench-ring-secret"
    for index, listener in enumerate(listeners):
        if index != rank:
            listener.close()
    ring = (_StampedRing if stamps else ring_lib.Ring)(rank, peers, listeners[rank],
                                                       timeout_seconds=60.0)
    buffer = np.random.default_rng(rank).standard_normal(values).astype(np.float32)
    expected = sum(np.random.default_rng(r).standard_normal(values).astype(np.float32)
                   for r in range(WORKERS))
    barrier = np.zeros(1, np.float32)
    np.testing.assert_array_equal(ring.all_reduce(buffer), expected)
    loopback, seconds, loopback_cpu, ring_cpu = [], [], [], []
    for _ in range(rounds):
        if rank == 0:
            cpu = time.process_time()
            loopback.append(cost_model.measure_loopback_bandwidth(streams=2, repeats=1))
            # Both ends of both streams ran here: CPU seconds per byte sent and received.
            loopback_cpu.append((time.process_time() - cpu) / (2 * LOOPBACK_BYTES))
        ring.all_reduce(barrier)
        ring.all_reduce(buffer)  # warm
        times = []
        cpu = time.process_time()
        for _ in range(repeats):
            start = time.perf_counter()
            ring.all_reduce(buffer)
            times.append(time.perf_counter() - start)
        # This worker sent and received 2 (N - 1) / N of the buffer each time.
        ring_cpu.append((time.process_time() - cpu) / repeats
                        / (2 * (WORKERS - 1) / WORKERS * buffer.nbytes))
        seconds.append(statistics.median(times))
        ring.all_reduce(barrier)
    ring.close()
    if rank == 0:
        results.put({"loopback": loopback, "seconds": seconds, "loopback_cpu": loopback_cpu,
                     "ring_cpu": ring_cpu, "stamps": getattr(ring, "stamps", None)})


def _listeners():
    listeners = [ring_lib.listen("127.0.0.1") for _ in range(WORKERS)]
    return listeners, [("127.0.0.1", s.getsockname()[1]) for s in listeners]


def run(values=MODEL_VALUES, rounds=5, repeats=20, stamps=False):
    """Both figures per round: `{"loopback": [B/s], "seconds": [s per all-reduce], ...}`.

    With `stamps`, also worker 0's main thread's seconds sending and waiting, in all.
    """
    context = multiprocessing.get_context("fork")
    listeners, peers = _listeners()
    results = context.Queue()
    workers = [context.Process(target=_worker, args=(rank, listeners, peers, values, rounds,
                                                     repeats, results, stamps))
               for rank in range(WORKERS)]
    for worker in workers:
        worker.start()
    for listener in listeners:
        listener.close()
    out = results.get(timeout=600)
    for worker in workers:
        worker.join()
    sent = 2 * (WORKERS - 1) / WORKERS * values * 4
    out["ring"] = [sent / s for s in out["seconds"]]
    out["ratio"] = [r / b for r, b in zip(out["ring"], out["loopback"])]
    out["bytes"] = values * 4
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--values", type=int, default=MODEL_VALUES)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--stamps", action="store_true",
                        help="also time worker 0's sending and waiting (the rest: adding)")
    args = parser.parse_args()
    out = run(args.values, args.rounds, args.repeats, args.stamps)
    print(f"buffer {out['bytes'] / 1e6:.1f} MB float32, {WORKERS} workers, "
          f"{args.repeats} all-reduces a round; rates in GB/s each way")
    print("round  loopback  ring  ring/loopback  ms per all-reduce")
    for i, (b, r, q, s) in enumerate(zip(out["loopback"], out["ring"], out["ratio"],
                                         out["seconds"])):
        print(f"{i:5d}  {b / 1e9:8.2f}  {r / 1e9:4.2f}  {q:13.2f}  {s * 1e3:17.2f}")
    print(f"median  {statistics.median(out['loopback']) / 1e9:7.2f}  "
          f"{statistics.median(out['ring']) / 1e9:4.2f}  {statistics.median(out['ratio']):13.2f}"
          f"  {statistics.median(out['seconds']) * 1e3:17.2f}")
    print(f"best    {max(out['loopback']) / 1e9:7.2f}  {max(out['ring']) / 1e9:4.2f}  "
          f"{max(out['ring']) / max(out['loopback']):13.2f}  {min(out['seconds']) * 1e3:17.2f}")
    # CPU time holds under load, where the rates follow what the other processes leave.
    print(f"CPU ms per GB sent and received (worker 0): loopback "
          f"{statistics.median(out['loopback_cpu']) * 1e12:.0f}, ring "
          f"{statistics.median(out['ring_cpu']) * 1e12:.0f}")
    if out["stamps"]:
        # Every all-reduce of the run, the untimed ones too.
        share = {k: v / out["stamps"]["all"] for k, v in out["stamps"].items()}
        print(f"worker 0's main thread, share of its all-reduces' time: sending "
              f"{share['send']:.0%}, waiting for pieces {share['wait']:.0%}, the rest (adding, "
              f"Python) {1 - share['send'] - share['wait']:.0%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
