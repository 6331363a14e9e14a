"""Worker script: the planner's predicted data-parallel step against a measured one.

Run by tests/test_planner_verified.py as two local workers. Each worker asks
`mgpu_tf.plan` for the data-parallel step over the two workers on the loopback
interconnect (compute measured here, on one worker's share of the batch, while
the other worker does the same), then trains the same MLP under
`make_strategy("multi_worker")` and times its steps. Prints `name: value` lines.
"""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import mgpu_tf  # noqa: E402

GLOBAL_BATCH = 256
WIDTH = 1024
WARMUP_STEPS = 5
TIMED_STEPS = 30


def build_model():
    return keras.Sequential([keras.Input((WIDTH,))]
                            + [keras.layers.Dense(WIDTH, activation="relu") for _ in range(4)]
                            + [keras.layers.Dense(1)])


class StepTimes(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.ends = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


def seconds_of(strategy, collective, repeats=15):
    """The median seconds of one collective, each call waited for."""
    once = tf.function(lambda: strategy.run(collective))
    once()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        tf.nest.map_structure(lambda t: strategy.experimental_local_results(t)[0].numpy(),
                              once())
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds))


def measure_link(strategy, model):
    """Bandwidth and latency per hop of TensorFlow's collectives between the workers."""
    elements = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    context = tf.distribute.get_replica_context
    latency = seconds_of(strategy, lambda: context().all_reduce("SUM", tf.ones((1,))))
    # Each worker's half gathered: (N-1)/N of the gradient bytes over each link.
    gather = seconds_of(strategy, lambda: context().all_gather(
        tf.ones((elements // 2,)), axis=0))
    bandwidth = 0.5 * elements * 4 / max(gather - latency, 1e-9)
    return bandwidth, latency / 2  # a ring of 2 takes 2 hops


def main():
    strategy = mgpu_tf.make_strategy("multi_worker")
    model = build_model()
    socket_plan = mgpu_tf.plan(model, devices=1, workers=2, device_memory="4GiB",
                               global_batch_size=GLOBAL_BATCH, interconnect="loopback")
    bandwidth, latency = measure_link(strategy, model)
    result = mgpu_tf.plan(model, devices=1, workers=2, device_memory="4GiB",
                          global_batch_size=GLOBAL_BATCH, optimizer="adam",
                          interconnect="loopback", bandwidth=bandwidth, latency=latency)
    data = result.recommended
    print(f"socket bandwidth GB/s: {socket_plan.interconnect.bandwidth / 1e9:.2f}")
    print(f"socket predicted ms: {socket_plan.recommended.step_seconds * 1e3:.2f}")
    print(f"hop latency ms: {latency * 1e3:.2f}")
    print(f"option: {data.name}")
    print(f"compute ms: {data.compute_seconds * 1e3:.2f}")
    print(f"bandwidth GB/s: {result.interconnect.bandwidth / 1e9:.2f}")
    print(f"predicted ms: {data.step_seconds * 1e3:.2f}")
    print(f"predicted efficiency: {data.efficiency:.3f}")

    with strategy.scope():
        model = build_model()
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    rng = np.random.RandomState(0)
    steps = WARMUP_STEPS + TIMED_STEPS
    x = rng.randn(steps * GLOBAL_BATCH, WIDTH).astype("float32")
    y = rng.randn(steps * GLOBAL_BATCH, 1).astype("float32")
    examples = tf.data.Dataset.from_tensor_slices((x, y))
    times = StepTimes()
    model.fit(mgpu_tf.shard_dataset(examples, strategy, GLOBAL_BATCH), epochs=1, verbose=0,
              callbacks=[times])
    measured = float(np.median(np.diff(times.ends[WARMUP_STEPS - 1:])))
    print(f"measured ms: {measured * 1e3:.2f}")
    print(f"ratio: {measured / data.step_seconds:.3f}")
    print("done")


if __name__ == "__main__":
    sys.exit(main())
