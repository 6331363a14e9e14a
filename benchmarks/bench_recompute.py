"""Re-materialisation in `ModelParallel`: a step's memory and time per recompute mode.

    nice -n 10 python benchmarks/bench_recompute.py memory [ROUNDS]
    nice -n 10 python benchmarks/bench_recompute.py resnet

`memory` trains a model whose activations dominate its weights (8 Dense layers of
256 units on a batch of 4096: 2 MiB of weights, 4 MiB per layer's activation) as one
stage, under recompute never / except_last / always with 1, 4 and 8 micro-batches,
each setting in a fresh process, the settings alternating within each round. A step's
memory is TensorFlow's allocator statistics of the CPU device
(`tf.config.experimental.get_memory_info`): the peak over one traced step, after
`reset_memory_stats`, above what was in use before it (the weights); it holds the
step's gradients, activations and temporaries. Beside it: the step's median time, the
whole run's (wrapping the model, the traced first step and the 6 after it) and
`mgpu_tf`'s planner estimate of the same bytes (gradients plus activations and
temporaries, or the update's workspace).

`resnet` times Keras' ResNet50 (32x32 images, 4 classes, batch 32, 4 micro-batches,
deferred batch normalisation) cut into 1, 2 and 4 stages on as many logical CPU
devices of this machine's cores: the median step after the first, the first (tracing)
and the whole run (cutting the model, the first step and the 5 after it).
"""

import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

MODES = ("never", "except_last", "always")
MICROBATCHES = (1, 4, 8)
ROWS, WIDTH, LAYERS = 4096, 256, 8


def _dense_stack():
    import keras

    keras.utils.set_random_seed(0)
    layers = [keras.Input((WIDTH,))]
    layers += [keras.layers.Dense(WIDTH, activation="tanh") for _ in range(LAYERS)]
    return keras.Sequential(layers + [keras.layers.Dense(1)])


def one_memory(mode, microbatches):
    """In a fresh process: prints `bytes seconds estimate` for one setting."""
    import keras
    import numpy as np
    import tensorflow as tf

    import mgpu_tf
    from mgpu_tf.planner import memory as memory_lib

    model = _dense_stack()
    estimate = memory_lib.measure_model(model).footprints(
        ROWS, 1, slots=0, recompute=mode, microbatches=microbatches)[0]
    started = time.perf_counter()
    wrapped = mgpu_tf.ModelParallel(model, ["CPU:0"], microbatches=microbatches, recompute=mode)
    wrapped.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse")
    x, y = np.ones((ROWS, WIDTH), "float32"), np.ones((ROWS, 1), "float32")
    wrapped.train_on_batch(x, y)  # traces
    tf.config.experimental.reset_memory_stats("CPU:0")
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    wrapped.train_on_batch(x, y)
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"] - before
    times = []
    for _ in range(5):
        start = time.perf_counter()
        wrapped.train_on_batch(x, y)
        times.append(time.perf_counter() - start)
    whole = time.perf_counter() - started
    predicted = estimate.total - estimate.params - estimate.optimizer
    print(peak, statistics.median(times), predicted, estimate.gradients, whole)


def memory(rounds=3):
    results = {}
    for _ in range(rounds):
        for microbatches in MICROBATCHES:
            for mode in MODES:
                out = subprocess.run([sys.executable, __file__, "_memory", mode,
                                      str(microbatches)], capture_output=True, text=True,
                                     check=True).stdout.split()
                results.setdefault((mode, microbatches), []).append([float(v) for v in out])
    mib = 2 ** 20
    print(f"{'recompute':<12}{'M':>3}{'step peak':>12}{'activations':>13}{'vs never':>10}"
          f"{'step':>10}{'vs never':>10}{'whole run':>11}{'vs never':>10}{'planner':>11}"
          f"{'planner/measured':>18}")
    for microbatches in MICROBATCHES:
        never = results["never", microbatches]
        base_peak = statistics.median(r[0] for r in never)
        base_time = statistics.median(r[1] for r in never)
        base_whole = statistics.median(r[4] for r in never)
        gradients = never[0][3]
        for mode in MODES:
            rows = results[mode, microbatches]
            peak = statistics.median(r[0] for r in rows)
            seconds = statistics.median(r[1] for r in rows)
            whole = statistics.median(r[4] for r in rows)
            predicted = rows[0][2]
            print(f"{mode:<12}{microbatches:>3}{peak / mib:>9.1f} MiB"
                  f"{(peak - gradients) / mib:>9.1f} MiB"
                  f"{(peak - gradients) / (base_peak - gradients):>10.2f}"
                  f"{seconds * 1e3:>7.0f} ms{seconds / base_time:>10.2f}"
                  f"{whole:>9.2f} s{whole / base_whole:>10.2f}"
                  f"{predicted / mib:>7.1f} MiB{predicted / peak:>18.2f}")


def one_resnet(stages):
    import keras
    import numpy as np

    import mgpu_tf

    mgpu_tf.simulate_devices(4)
    keras.utils.set_random_seed(0)
    model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=4)
    started = time.perf_counter()
    model = mgpu_tf.ModelParallel(model, [f"CPU:{k}" for k in range(stages)], microbatches=4,
                                  deferred_batch_norm=True)
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="sparse_categorical_crossentropy")
    x = np.random.default_rng(0).uniform(size=(32, 32, 32, 3)).astype("float32")
    y = np.arange(32) % 4
    start = time.perf_counter()
    model.train_on_batch(x, y)
    first = time.perf_counter() - start
    times = []
    for _ in range(5):
        start = time.perf_counter()
        model.train_on_batch(x, y)
        times.append(time.perf_counter() - start)
    print(statistics.median(times), first, time.perf_counter() - started)


def resnet():
    print(f"{'stages':>6}{'step':>10}{'vs 1 stage':>12}{'first step (trace)':>20}"
          f"{'whole run':>11}{'vs 1 stage':>12}")
    base = base_whole = None
    for stages in (1, 2, 4):
        out = subprocess.run([sys.executable, __file__, "_resnet", str(stages)],
                             capture_output=True, text=True, check=True).stdout.split()
        seconds, first, whole = (float(v) for v in out)
        base, base_whole = base or seconds, base_whole or whole
        print(f"{stages:>6}{seconds * 1e3:>7.0f} ms{seconds / base:>12.2f}{first:>18.0f} s"
              f"{whole:>9.0f} s{whole / base_whole:>12.2f}", flush=True)


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "memory"
    if command == "_memory":
        one_memory(sys.argv[2], int(sys.argv[3]))
    elif command == "_resnet":
        one_resnet(int(sys.argv[2]))
    elif command == "resnet":
        resnet()
    else:
        memory(int(sys.argv[2]) if len(sys.argv) > 2 else 3)
