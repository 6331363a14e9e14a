"""shard_optimizer_state across 2 real local workers: step time, fit time, gradient bytes sent.

For each transport (`tensorflow`: TensorFlow's collectives, where sharding all-to-alls the
gradient slices; `tcp`: mgpu_tf's ring, where sharding runs its reduce-scatter half) an MLP
is trained with Adam by Keras `fit` under `multi_worker` on 2 workers of one CPU device
each, unsharded and sharded, alternating in fresh worker groups. Prints the timed epoch's
step time, the whole fit's seconds, the bytes each worker sends per step computed from the
sizes (gradients; gradients and the gathered weights), and the bytes measured: the tcp
ring's own count, and for both the loopback interface's transmit counter (machine-wide).

    python benchmarks/bench_sharded_workers.py --rounds 2
"""

import argparse
import json
import statistics
import time

import numpy as np

import bench_sharded_state

WORKERS = 2


def _loopback_bytes():
    """Bytes sent on the loopback interface so far (all processes of the machine)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, fields = line.partition(":")
            if name.strip() == "lo":
                return int(fields.split()[8])
    return 0


def worker(payload):
    """One worker of a group: the fit; worker 0 prints `figures: {json}`."""
    import keras

    import mgpu_tf

    strategy = mgpu_tf.make_strategy("multi_worker", transport=payload["transport"],
                                     shard_optimizer_state=payload["sharded"])
    steps = payload["steps"]
    data = bench_sharded_state.training_data(payload["batch"])
    with strategy.scope():
        model = bench_sharded_state.compiled_model(payload["width"], payload["depth"])
    marks = []

    def mark(*_):
        connection = mgpu_tf.kind_of(strategy).connection
        ring = connection.ring.sent_bytes if connection is not None else 0
        marks.append((time.perf_counter(), _loopback_bytes(), ring))

    timer = keras.callbacks.LambdaCallback(on_epoch_begin=mark, on_epoch_end=mark)
    start = time.perf_counter()
    # Epoch 1 traces and warms up; epoch 2 is timed; and the whole fit.
    model.fit(data, epochs=2, steps_per_epoch=steps, verbose=0, callbacks=[timer])
    fit = time.perf_counter() - start
    (t0, lo0, ring0), (t1, lo1, ring1) = marks[2], marks[3]
    params = int(sum(np.prod(v.shape) for v in model.trainable_variables))
    if strategy.cluster_resolver.task_id == 0:
        print("figures: " + json.dumps({
            "step": (t1 - t0) / steps, "fit": fit, "params": params,
            "loopback": (lo1 - lo0) / steps / WORKERS, "ring": (ring1 - ring0) / steps}),
            flush=True)


def _run_group(payload):
    import worker_group

    return worker_group.run(__file__, payload, WORKERS)


def _computed(params, sharded):
    """Bytes each worker sends per step: (gradients, gradients and gathered weights)."""
    padded = -(-params // WORKERS) * WORKERS * 4
    share = (WORKERS - 1) / WORKERS * padded
    # Unsharded: a ring all-reduce (reduce-scatter, then all-gather of the sums).
    # Sharded: the reduce-scatter of the gradients, then an all-gather of the new weights.
    return (share, 2 * share) if sharded else (2 * share, 2 * share)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--transports", default="tensorflow,tcp")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=4)
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    print(f"MLP {args.depth}x{args.width} (Adam), global batch {args.batch}, {args.steps} timed "
          f"steps, {args.rounds} alternating rounds, {WORKERS} local workers of one CPU device")
    mib = 2 ** 20
    print(f"{'transport':>10}{'round':>7}{'':>9}{'step':>10}{'fit':>8}{'grad MiB':>10}"
          f"{'all MiB':>9}{'ring MiB':>10}{'lo MiB':>9}   (MiB sent per worker per step)")
    for transport in args.transports.split(","):
        ratios = []
        for round_index in range(args.rounds):
            figures = {}
            for sharded in (False, True):
                payload = {"transport": transport, "sharded": sharded, "batch": args.batch,
                           "steps": args.steps, "width": args.width, "depth": args.depth}
                run = figures[sharded] = _run_group(payload)
                grad, total = _computed(run["params"], sharded)
                ring = f"{run['ring'] / mib:>10.2f}" if transport == "tcp" else f"{'-':>10}"
                print(f"{transport:>10}{round_index:>7}{'sharded' if sharded else 'whole':>9}"
                      f"{run['step'] * 1e3:>7.1f} ms{run['fit']:>6.1f} s{grad / mib:>10.2f}"
                      f"{total / mib:>9.2f}{ring}{run['loopback'] / mib:>9.2f}", flush=True)
            ratios.append((figures[True]["step"] / figures[False]["step"],
                           figures[True]["fit"] / figures[False]["fit"]))
        print(f"{transport:>10}  median of the rounds' sharded/whole ratios: step "
              f"{statistics.median(r[0] for r in ratios):.3f}, whole fit "
              f"{statistics.median(r[1] for r in ratios):.3f}", flush=True)


if __name__ == "__main__":
    main()
