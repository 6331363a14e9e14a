"""`bucket_bytes` swept on 2 real local workers: step time and whole fit, overlap on and off.

`mgpu-tf bench`'s MLP (784 -> 1024 x 3 -> 10, SGD, 11.6 MB of float32 gradients) is
trained by Keras `fit` under `multi_worker` on 2 workers of one CPU thread each, for each
setting in fresh worker groups, the settings alternating round by round. A setting is a
transport, a bucket size (0: one all-reduce after the backward pass, as without the
option) and overlap: "on" is the option as it is, "off" holds every bucket until the
whole backward pass is done (the same buckets, nothing overlapped). Prints the timed
(second) epoch's step time and the whole fit's seconds, and the medians over the rounds.

    python benchmarks/bench_buckets.py --rounds 3
    python benchmarks/bench_buckets.py --rounds 3 --only 0,2,7,8  # one bucket against 4 MB
"""

import argparse
import json
import os
import statistics
import time

WORKERS = 2
MB = 1 << 20
# (transport, bucket bytes, overlap) of each setting.
SETTINGS = [("tcp", 0, True)] + [("tcp", b * MB, True) for b in (1, 4, 16, 64)] + [
    ("tcp", b * MB, False) for b in (1, 4)] + [("tensorflow", 0, True), ("tensorflow", 4 * MB, True)]


def _held(hook):
    """Makes `hook`'s gradient sum start only once every gradient exists (overlap off)."""
    import tensorflow as tf

    summing = hook.gradient_sum

    def held(grads_and_vars):
        grads_and_vars = list(grads_and_vars)
        with tf.control_dependencies([g for g, _ in grads_and_vars if g is not None]):
            return summing([(None if g is None else tf.identity(g), v)
                            for g, v in grads_and_vars])

    hook.gradient_sum = held


def worker(payload):
    """One worker of a group: the fit; worker 0 prints `figures: {json}`."""
    import keras
    import tensorflow as tf

    import mgpu_tf
    from mgpu_tf.cli import bench_job
    from mgpu_tf.comm import optimizer_step
    from mgpu_tf.planner.bench.settings import ModelSpec

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    options = {"transport": payload["transport"]}
    if payload["bucket_bytes"]:
        options["bucket_bytes"] = payload["bucket_bytes"]
    strategy = mgpu_tf.make_strategy("multi_worker", **options)
    spec, steps = ModelSpec(), payload["steps"]
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = bench_job._build_model(spec)
        model.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    if not payload["overlap"]:
        _held(optimizer_step.find(model.optimizer))
    marks = []
    timer = keras.callbacks.LambdaCallback(on_epoch_begin=lambda *_: marks.append(
        time.perf_counter()), on_epoch_end=lambda *_: marks.append(time.perf_counter()))
    start = time.perf_counter()
    # Epoch 1 traces and warms up; epoch 2 is timed; and the whole fit.
    model.fit(bench_job._dataset(spec, payload["batch"]), epochs=2, steps_per_epoch=steps,
              verbose=0, callbacks=[timer])
    fit = time.perf_counter() - start
    if strategy.cluster_resolver.task_id == 0:
        print("figures: " + json.dumps({"step": (marks[3] - marks[2]) / steps, "fit": fit}),
              flush=True)


def _run_group(payload):
    import worker_group

    return worker_group.run(__file__, payload, WORKERS)


def _label(setting):
    transport, size, overlap = setting
    buckets = f"{size // MB} MB buckets" if size else "one all-reduce"
    return f"{transport}, {buckets}" + ("" if overlap or not size else ", overlap off")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--only", help="comma-separated indices into SETTINGS (default: all)")
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    print(f"MLP 4x1024 (SGD), global batch {args.batch}, {args.steps} timed steps, "
          f"{args.rounds} alternating rounds, {WORKERS} local workers of one CPU thread; "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    chosen = ([SETTINGS[int(i)] for i in args.only.split(",")] if args.only else SETTINGS)
    runs = {s: [] for s in chosen}
    for round_index in range(args.rounds):
        for setting in chosen:
            transport, size, overlap = setting
            figures = _run_group({"transport": transport, "bucket_bytes": size,
                                  "overlap": overlap, "batch": args.batch, "steps": args.steps})
            runs[setting].append(figures)
            print(f"round {round_index}  {_label(setting):<34}{figures['step'] * 1e3:>7.1f} ms"
                  f"{figures['fit']:>7.1f} s", flush=True)
    print(f"\nmedians over {args.rounds} rounds; load {os.getloadavg()[0]:.2f}")
    print("| setting | step ms | whole fit s |\n|---|---:|---:|")
    for setting, figures in runs.items():
        print(f"| {_label(setting)} | {statistics.median(f['step'] for f in figures) * 1e3:.1f} "
              f"| {statistics.median(f['fit'] for f in figures):.1f} |")


if __name__ == "__main__":
    main()
