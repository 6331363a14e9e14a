"""Model-parallel figures: pipeline speed-up, stage balance, per-device variable memory.

Run from the repository root:

    python benchmarks/bench_pipeline.py

The CPU is split into 4 logical devices and each op runs on one thread
(intra-op 1); ModelParallel runs one op at a time per device, so each of the two
pipeline stages uses one core (inter-op 4 leaves threads for the loss, the
optimizer and the transfers between devices). Every comparison runs side by side
in this one process, interleaved over rounds, and the fastest round counts; quote
the ratios. The "cores used" column (process CPU time over wall time) shows
whether a second core was free for the stages to overlap on. Beside the fastest
round's step, each pipeline's whole run: building and tracing it, its warm-up
steps and every timed step of every round, what a user waits for (after one
throwaway build, so that the process' own start-up falls on no setting).
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tensorflow as tf  # noqa: E402

# Threading, like the device split, must be set before TensorFlow's runtime starts.
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(4)

import keras  # noqa: E402
import numpy as np  # noqa: E402

import mgpu_tf  # noqa: E402
from known_cost import Wait  # noqa: E402 - run as a script, beside it

mgpu_tf.simulate_devices(4)
tf.get_logger().setLevel("ERROR")  # train_on_batch on several models warns of retracing

from mgpu_tf.model_parallel import balance as balance_lib  # noqa: E402
from mgpu_tf.model_parallel import partition  # noqa: E402
from mgpu_tf.model_parallel import placement  # noqa: E402


def _dense_stack(inputs, widths, seed=0):
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((inputs,))]
    layers += [keras.layers.Dense(w, activation="relu", name=f"dense_{i}")
               for i, w in enumerate(widths)]
    return keras.Sequential(layers)


def speed_up(args):
    """Train-step time of naive model parallelism (M=1) over GPipe with M micro-batches."""
    widths = [args.width] * 8
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch, args.width)).astype("float32")
    y = rng.normal(size=(args.batch, args.width)).astype("float32")
    def build(m):
        model = mgpu_tf.ModelParallel(_dense_stack(args.width, widths), ["CPU:0", "CPU:1"],
                                      balance="uniform", microbatches=m)
        model.compile(optimizer=keras.optimizers.SGD(1e-4), loss="mse")
        for _ in range(2):
            model.train_on_batch(x, y)
        return model

    build(1)  # the process' one-off start-up, which would fall on the first setting alone
    models, whole = {}, {}
    for m in args.microbatches:
        start = time.perf_counter()
        models[m] = build(m)
        whole[m] = time.perf_counter() - start
    best = {m: (float("inf"), 0.0) for m in models}
    for _ in range(args.rounds):
        for m, model in models.items():
            cpu, start = time.process_time(), time.perf_counter()
            for _ in range(args.steps):
                model.train_on_batch(x, y)
            wall = time.perf_counter() - start
            whole[m] += wall
            best[m] = min(best[m], (wall / args.steps, (time.process_time() - cpu) / wall))
    stages = 2
    print(f"\nPipeline speed-up: 2 stages x 4 Dense({args.width}), batch {args.batch}, "
          f"best of {args.rounds} rounds of {args.steps} steps; whole run: build, 2 warm-up "
          f"and {args.rounds * args.steps} timed steps")
    print(f"{'M':>3} {'step ms':>9} {'speed-up':>9} {'GPipe bound':>12} {'cores used':>11} "
          f"{'whole s':>8} {'whole speed-up':>15}")
    for m in models:
        bound = m * stages / (m + stages - 1)
        print(f"{m:>3} {best[m][0] * 1e3:>9.1f} {best[1][0] / best[m][0]:>9.2f} {bound:>12.2f} "
              f"{best[m][1]:>11.2f} {whole[m]:>8.2f} {whole[1] / whole[m]:>15.2f}")


def schedule(args):
    """The same speed-up with stages that wait instead of compute: the schedule alone."""
    x = np.ones((256, 4), "float32")

    def build(m):
        keras.utils.set_random_seed(0)
        waits = [Wait(2e-4, stateful=False) for _ in range(4)]
        model = mgpu_tf.ModelParallel(
            keras.Sequential([keras.Input((4,)), *waits[:2], keras.layers.Dense(4), *waits[2:]]),
            ["CPU:0", "CPU:1"], balance=[2, 3], microbatches=m)
        model.compile(optimizer="sgd", loss="mse")
        model.train_on_batch(x, x)
        return model

    build(1)  # as in speed_up: the process' start-up is no setting's
    models, whole = {}, {}
    for m in args.microbatches:
        start = time.perf_counter()
        models[m] = build(m)
        whole[m] = time.perf_counter() - start
    best = {m: float("inf") for m in models}
    for _ in range(args.rounds):
        for m, model in models.items():
            start = time.perf_counter()
            model.train_on_batch(x, x)
            wall = time.perf_counter() - start
            whole[m] += wall
            best[m] = min(best[m], wall)
    print(f"\nSchedule alone: 2 stages x 2 waits of 0.2 ms per row (forward), batch {len(x)}, "
          f"no cores needed; whole run: build, 1 warm-up and {args.rounds} timed steps")
    print(f"{'M':>3} {'step ms':>9} {'speed-up':>9} {'GPipe bound':>12} {'whole s':>8} "
          f"{'whole speed-up':>15}")
    for m in models:
        bound = m * 2 / (m + 1)
        print(f"{m:>3} {best[m] * 1e3:>9.1f} {best[1] / best[m]:>9.2f} {bound:>12.2f} "
              f"{whole[m]:>8.2f} {whole[1] / whole[m]:>15.2f}")


def _ratio(per_stage):
    return max(per_stage) / (sum(per_stage) / len(per_stage))


def balance_ratios(args):
    """Heaviest over mean stage for each partitioner, by bytes and by measured time."""
    widths = [512] * 4 + [256] * 16
    model = _dense_stack(512, widths)
    graph = partition.analyse(model)
    sample = np.ones((512, 512), "float32")
    seconds = balance_lib.measure_times(graph, sample)
    param_bytes = [u.param_bytes for u in graph.units]
    counts = {
        "uniform": balance_lib.balance_by_uniform(graph, 2),
        "params": balance_lib.balance_by_params(graph, 2),
        "time": balance_lib.balance_by_time(graph, 2, sample)[0],
    }
    print("\nBalance: 20 Dense layers (four 512-wide, then sixteen 256-wide), 2 stages, "
          "heaviest stage / mean stage (time: a second, independent measurement)")
    print(f"{'balance':>8} {'layers':>8} {'by bytes':>9} {'by time':>8}")
    for name, stage_counts in counts.items():
        bounds = np.cumsum([0] + stage_counts)
        by_bytes = [sum(param_bytes[a:b]) for a, b in zip(bounds, bounds[1:])]
        by_time = [sum(seconds[a:b]) for a, b in zip(bounds, bounds[1:])]
        print(f"{name:>8} {'/'.join(map(str, stage_counts)):>8} {_ratio(by_bytes):>9.2f} "
              f"{_ratio(by_time):>8.2f}")


def memory(args):
    """Variable bytes (weights and Adam slots) on each device, against total / K."""
    print("\nMemory: 8 Dense(512) layers, weights and Adam slots, bytes per device")
    print(f"{'K':>2} {'total MB':>9} {'heaviest device MB':>19} {'heaviest / (total/K)':>21}")
    for stages in (1, 2, 4):
        model = mgpu_tf.ModelParallel(_dense_stack(512, [512] * 8),
                                      [f"CPU:{i}" for i in range(stages)])
        model.compile(optimizer="adam", loss="mse")
        model.optimizer.build(model.trainable_variables)
        per_device = {}
        for variable in model.weights + model.optimizer.variables:
            if variable.path.endswith(("iteration", "learning_rate")):
                continue
            device = placement.device_of(variable)
            per_device[device] = per_device.get(device, 0) + variable.value.numpy().nbytes
        total = sum(per_device.values())
        heaviest = max(per_device.values())
        print(f"{stages:>2} {total / 2**20:>9.2f} {heaviest / 2**20:>19.2f} "
              f"{heaviest / (total / stages):>21.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--microbatches", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    speed_up(args)
    schedule(args)
    balance_ratios(args)
    memory(args)


if __name__ == "__main__":
    main()
