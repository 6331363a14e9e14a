"""Where a two-worker step's time goes over the tcp ring: the step, the step without its
gradient exchange, the exchange without its network, the ring op alone, the bare ring.

`mgpu-tf bench`'s MLP (784 -> 1024 x 3 -> 10, SGD, 11.7 MB of float32 gradients, global
batch 256) is trained by Keras `fit` under `make_strategy("multi_worker")` with default
options (`transport="auto"`: the tcp ring) on 2 local workers of one CPU thread each. In
the same processes, one after the other:

- `step`: the product as it is; the timed (second) epoch's step and the whole fit.
- `free`: the optimizer's gradient sum replaced by no sum at all (logs still cross).
- `local`: the gradients' whole path through `transport.all_reduce_gradients`, with the
  ring's `all_reduce` replaced by a one-worker ring's (every copy and buffer, no network).
- `op`: `transport.ring_all_reduce` of 11.7 MB alone, in a `tf.function` under
  `strategy.run`.
- `bare`: `Ring.all_reduce` of 11.7 MB of numpy, no TensorFlow.

Every call of the ring's `all_reduce` is stamped (`time.perf_counter_ns`, one clock for
both processes): its time inside, and how long the first worker to enter waited for the
other. `--trees` alternates source trees round by round (each run with `PYTHONPATH`).

    python benchmarks/bench_exchange.py --rounds 3 --steps 200
    python benchmarks/bench_exchange.py --trees /work/main,. --rounds 3
"""

import argparse
import io
import json
import os
import statistics
import sys
import time
import zlib

import numpy as np

WORKERS = 2
MODES = ("step", "free", "local", "op", "bare")
_GRADIENTS = zlib.crc32(b"gradients")


def _stamped(ring, stamps, local=None):
    """Wraps the ring's `all_reduce`; with `local` (a one-worker ring of the same tree), the
    gradients' all-reduce runs as on one worker: every copy and buffer, no network."""
    original = ring.all_reduce

    def all_reduce(buffer, op=0):
        start = time.perf_counter_ns()
        if local is not None and op == _GRADIENTS:
            out = local.all_reduce(buffer, op)
        else:
            out = original(buffer, op)
        stamps.append((op, start, time.perf_counter_ns()))
        return out

    ring.all_reduce = all_reduce
    return original


def _fit(strategy, spec, batch, steps, hold=None):
    import keras

    from mgpu_tf.cli import bench_job
    from mgpu_tf.comm import optimizer_step

    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = bench_job._build_model(spec)
        model.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    if hold is not None:
        optimizer_step.find(model.optimizer).gradient_sum = hold
    marks, cpu = [], []

    def mark(*_):
        marks.append(time.perf_counter_ns())
        cpu.append(time.process_time())

    timer = keras.callbacks.LambdaCallback(on_epoch_begin=mark, on_epoch_end=mark)
    start = time.perf_counter()
    model.fit(bench_job._dataset(spec, batch), epochs=2, steps_per_epoch=steps, verbose=0,
              callbacks=[timer])
    fit = time.perf_counter() - start
    # The process' CPU seconds a step (every thread): what the other processes' load moves
    # least.
    return model, {"step": (marks[3] - marks[2]) / steps / 1e9, "fit": fit,
                   "cpu": (cpu[3] - cpu[2]) / steps,
                   "epoch": [marks[2], marks[3]]}


def worker(payload):
    """One worker: every mode in turn; prints `figures: {json}` (each worker its own)."""
    import tensorflow as tf

    import mgpu_tf
    from mgpu_tf.comm import ring as ring_lib
    from mgpu_tf.comm import transport as transport_lib
    from mgpu_tf.planner.bench.settings import ModelSpec

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = mgpu_tf.make_strategy("multi_worker")
    spec, steps, batch = ModelSpec(), payload["steps"], payload["batch"]
    out = {"file": mgpu_tf.__file__}
    stamps = []
    connection = transport_lib.connect(strategy)
    listener = ring_lib.listen("127.0.0.1")
    solo = ring_lib.Ring(0, [listener.getsockname()], listener)
    for mode in payload["modes"]:
        if mode in ("step", "free", "local"):
            hold = (lambda grads_and_vars: list(grads_and_vars)) if mode == "free" else None
            original = _stamped(connection.ring, stamps, local=solo if mode == "local" else None)
            del stamps[:]
            _, figures = _fit(strategy, spec, batch, steps, hold)
            connection.ring.all_reduce = original
            a, b = figures.pop("epoch")
            inside = [s for s in stamps if a <= s[1] <= b]
            figures["stamps"] = [(s[0] == _GRADIENTS, s[1], s[2]) for s in inside]
            out[mode] = figures
        elif mode == "op":
            ring = connection.ring
            original = _stamped(ring, stamps)
            del stamps[:]
            values = sum(int(np.prod(w.shape)) for w in _fit_model_weights(spec))

            @tf.function
            def once():
                return strategy.run(lambda: transport_lib.ring_all_reduce(
                    connection, tf.ones((values,), tf.float32), "gradients"))

            once()
            times, cpu = [], time.process_time()
            for _ in range(payload["repeats"]):
                start = time.perf_counter_ns()
                strategy.experimental_local_results(once())[0]
                times.append(time.perf_counter_ns() - start)
            ring.all_reduce = original
            out[mode] = {"call": statistics.median(times) / 1e9,
                         "cpu": (time.process_time() - cpu) / payload["repeats"],
                         "stamps": [(True, s[1], s[2]) for s in stamps[-payload["repeats"]:]]}
        elif mode == "bare":
            ring = connection.ring
            values = sum(int(np.prod(w.shape)) for w in _fit_model_weights(spec))
            buffer = np.ones(values, np.float32)
            ring.all_reduce(buffer)
            times, cpu = [], time.process_time()
            for _ in range(payload["repeats"]):
                start = time.perf_counter_ns()
                ring.all_reduce(buffer, op=_GRADIENTS)
                end = time.perf_counter_ns()
                times.append((True, start, end))
            out[mode] = {"call": statistics.median(e - s for _, s, e in times) / 1e9,
                         "cpu": (time.process_time() - cpu) / payload["repeats"],
                         "stamps": times}
        connection.ring.all_reduce(np.zeros(1, np.float32))  # the modes start together
    print("figures: " + json.dumps(out), flush=True)


def _fit_model_weights(spec):
    from mgpu_tf.cli import bench_job

    return bench_job._build_model(spec).trainable_weights


def run_group(tree, payload):
    """Both workers' figures for one group run with `tree` first on `PYTHONPATH`."""
    from mgpu_tf.cluster import launcher

    text = io.StringIO()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.path.abspath(tree), TF_NUM_INTRAOP_THREADS="1",
               TF_NUM_INTEROP_THREADS="1", OMP_NUM_THREADS="1")
    code = launcher.launch([sys.executable, os.path.abspath(__file__), "--worker",
                            json.dumps(payload)], WORKERS, env=env, output=text)
    figures = {}
    for line in text.getvalue().splitlines():
        if "figures: " in line:
            figures[int(line[1:line.index("]")])] = json.loads(line.split("figures: ", 1)[1])
    if len(figures) != WORKERS:
        raise RuntimeError(f"the workers failed (exit {code}):\n{text.getvalue()[-3000:]}")
    return figures


def _ring_parts(mine, other, gradients=True):
    """Per call of the gradients' ring: ms inside, ms between the two workers' entries."""
    pairs = [(m, o) for m, o in zip([s for s in mine if s[0] == gradients],
                                    [s for s in other if s[0] == gradients])]
    inside = [(m[2] - m[1]) / 1e6 for m, _ in pairs]
    skew = [abs(o[1] - m[1]) / 1e6 for m, o in pairs]
    both = [(m[2] - max(m[1], o[1])) / 1e6 for m, o in pairs]
    return inside, skew, both


def summarise(figures):
    """One row of ms per part for worker 0 of one group run."""
    w0, w1 = figures[0], figures[1]
    row = {}
    for mode in ("step", "free", "local"):
        if mode in w0:
            row[f"{mode} step"] = w0[mode]["step"] * 1e3
            row[f"{mode} fit s"] = w0[mode]["fit"]
            row[f"{mode} cpu"] = w0[mode]["cpu"] * 1e3
            inside, skew, both = _ring_parts(w0[mode]["stamps"], w1[mode]["stamps"])
            logs, _, _ = _ring_parts(w0[mode]["stamps"], w1[mode]["stamps"], gradients=False)
            if inside:
                row[f"{mode} ring in"] = statistics.median(inside)
                row[f"{mode} wait"] = statistics.median(skew)
                row[f"{mode} ring after both in"] = statistics.median(both)
            if logs:
                row[f"{mode} logs ring"] = statistics.median(logs)
    for mode in ("op", "bare"):
        if mode in w0:
            row[f"{mode} call"] = w0[mode]["call"] * 1e3
            row[f"{mode} cpu"] = w0[mode]["cpu"] * 1e3
            inside, skew, both = _ring_parts(w0[mode]["stamps"], w1[mode]["stamps"])
            row[f"{mode} ring in"] = statistics.median(inside)
            row[f"{mode} wait"] = statistics.median(skew)
            row[f"{mode} ring after both in"] = statistics.median(both)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--trees", default=".", help="comma-separated source trees")
    parser.add_argument("--json", help="also write every run's figures to this file")
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    payload = {"steps": args.steps, "batch": args.batch, "repeats": args.repeats,
               "modes": args.modes.split(",")}
    trees = args.trees.split(",")
    print(f"{args.rounds} rounds, {args.steps} timed steps, trees {trees}; load "
          f"{os.getloadavg()}", flush=True)
    rows, raw = {t: [] for t in trees}, []
    for index in range(args.rounds):
        for tree in trees:
            figures = run_group(tree, payload)
            raw.append({"tree": tree, "round": index, "figures": figures})
            row = summarise(figures)
            rows[tree].append(row)
            print(f"round {index} {tree} ({figures[0]['file']}): " + ", ".join(
                f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    print(f"\nmedians over {args.rounds} rounds (ms unless s); load {os.getloadavg()}")
    keys = list(rows[trees[0]][0])
    print("| part | " + " | ".join(trees) + " |\n|---|" + "---:|" * len(trees))
    for key in keys:
        print(f"| {key} | " + " | ".join(
            f"{statistics.median(r[key] for r in rows[t] if key in r):.2f}" for t in trees)
            + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f)


if __name__ == "__main__":
    main()
