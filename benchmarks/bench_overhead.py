"""What the toolkit costs: make_strategy + Keras fit against hand-built tf.distribute code.

For each setting (mirrored on 2 simulated devices; multi_worker with 2 local
workers) the same model is trained on the same synthetic data three ways, in
alternating fresh processes so that all see the same machine load:

- hand loop: the `tf.distribute` strategy built directly, and the training loop a
  user writes without the toolkit (`strategy.run` in a `tf.function`);
- hand + fit: the strategy built directly, trained with Keras `fit` (on several
  workers only after `mgpu_tf.compat.apply_multi_worker_fixes()`, without which
  fit fails there);
- mgpu_tf: `make_strategy(...)` and Keras `fit`.

Prints per round the timed steps' examples/s and the whole run's seconds (the hand
loop's every step, its warm-up with the tracing included; the whole `fit` of both
epochs), their medians, and the ratios of mgpu_tf to each by both figures.

    python benchmarks/bench_overhead.py --rounds 3
"""

import argparse
import statistics
import time

import numpy as np

from mgpu_tf.planner.bench import runner

WIDTH, DEPTH, FEATURES, CLASSES = 512, 3, 784, 10


def _data(examples, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((examples, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=examples).astype("int32")
    return x, y


def _model():
    import keras

    layers = [keras.Input((FEATURES,))]
    layers += [keras.layers.Dense(WIDTH, activation="relu") for _ in range(DEPTH)]
    return keras.Sequential(layers + [keras.layers.Dense(CLASSES)])


def _dataset(x, y, batch):
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return (tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True)
            .repeat().prefetch(tf.data.AUTOTUNE).with_options(options))


def _hand_strategy(strategy_name):
    """The strategy as a user builds it with tf.distribute alone."""
    import tensorflow as tf

    if strategy_name == "mirrored":
        tf.config.set_logical_device_configuration(
            tf.config.list_physical_devices("CPU")[0],
            [tf.config.LogicalDeviceConfiguration()] * 2)
        return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    return tf.distribute.MultiWorkerMirroredStrategy()


def _hand(strategy_name, batch, steps, warmup):
    import keras
    import tensorflow as tf

    strategy = _hand_strategy(strategy_name)
    x, y = _data(batch * 32)
    with strategy.scope():
        model = _model()
        optimizer = keras.optimizers.SGD(0.01)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="none")
    iterator = iter(strategy.experimental_distribute_dataset(_dataset(x, y, batch)))

    def step(features, labels):
        with tf.GradientTape() as tape:
            per_example = loss_fn(labels, model(features, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(iterator):
        return strategy.run(step, args=next(iterator))

    started = time.perf_counter()
    for _ in range(warmup):
        train_step(iterator)
    start = time.perf_counter()
    for _ in range(steps):
        loss = train_step(iterator)
    strategy.reduce("SUM", loss, axis=None).numpy()
    end = time.perf_counter()
    return batch * steps / (end - start), end - started


def _fit(strategy, batch, steps):
    import keras

    x, y = _data(batch * 32)
    with strategy.scope():
        model = _model()
        model.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    timer = _epoch_timer()
    # Epoch 1 traces and warms up; epoch 2 is timed, without fit's own set-up; and the whole fit.
    start = time.perf_counter()
    model.fit(_dataset(x, y, batch), epochs=2, steps_per_epoch=steps, verbose=0,
              callbacks=[timer])
    return batch * steps / timer.seconds[-1], time.perf_counter() - start


def _toolkit(strategy_name, batch, steps, warmup):
    import mgpu_tf

    if strategy_name == "mirrored":
        mgpu_tf.simulate_devices(2)
        strategy = mgpu_tf.make_strategy("mirrored")
    else:
        strategy = mgpu_tf.make_strategy("multi_worker")
    return _fit(strategy, batch, steps)


def _hand_fit(strategy_name, batch, steps, warmup):
    """The strategy built by hand, trained with the same Keras fit as the toolkit."""
    from mgpu_tf import compat

    if strategy_name != "mirrored":
        compat.apply_multi_worker_fixes()  # without it Keras fit fails on several workers
    return _fit(_hand_strategy(strategy_name), batch, steps)


def _epoch_timer():
    import keras

    class EpochTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds = []

        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self._start)

    return EpochTimer()


def run_one(payload):
    """Runs in a fresh process (a worker, for multi_worker); returns the figures."""
    run = {"hand": _hand, "hand_fit": _hand_fit, "mgpu_tf": _toolkit}[payload["variant"]]
    speed, seconds = run(payload["strategy"], payload["batch"], payload["steps"],
                         payload["warmup"])
    return {"examples_per_sec": speed, "run_seconds": seconds}


def _measure(variant, strategy, args):
    """`(examples/s of the timed steps, seconds of the whole run)` of one fresh run."""
    # As many warm-up steps as fit's untimed first epoch, so that whole runs train as long.
    warmup = args.steps if args.warmup is None else args.warmup
    payload = {"variant": variant, "strategy": strategy, "batch": args.batch,
               "steps": args.steps, "warmup": warmup}
    # One thread per worker process, like one device each.
    workers, threads = (1, None) if strategy == "mirrored" else (2, 1)
    result = runner.run_in_fresh_process(run_one, payload, workers=workers, threads=threads,
                                         label=f"{variant} on {strategy}")
    return result["examples_per_sec"], result["run_seconds"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=None,
                        help="the hand loop's untimed steps (default: --steps, as fit's "
                        "first epoch)")
    parser.add_argument("--strategies", default="mirrored,multi_worker")
    args = parser.parse_args()
    print(f"model: MLP {DEPTH}x{WIDTH}, global batch {args.batch}, {args.steps} timed steps, "
          f"{args.rounds} alternating rounds")
    print(f"{'':<20}{'timed steps, ex/s':^33}{'whole run, s':^33}")
    columns = f"{'hand loop':>11}{'hand + fit':>12}{'mgpu_tf':>10}"
    print(f"{'setting':<14}{'round':>6}{columns}{columns}")
    for strategy in args.strategies.split(","):
        runs = {"hand": [], "hand_fit": [], "mgpu_tf": []}
        for round_index in range(args.rounds):
            for variant, figures in runs.items():
                figures.append(_measure(variant, strategy, args))
            speeds = "".join(f"{v[-1][0]:>{w}.0f}" for v, w in zip(runs.values(), (11, 12, 10)))
            wall = "".join(f"{v[-1][1]:>{w}.2f}" for v, w in zip(runs.values(), (11, 12, 10)))
            print(f"{strategy:<14}{round_index:>6}{speeds}{wall}", flush=True)
        speed = [statistics.median(r[0] for r in v) for v in runs.values()]
        wall = [statistics.median(r[1] for r in v) for v in runs.values()]
        print(f"{strategy:<14}{'median':>6}{speed[0]:>11.0f}{speed[1]:>12.0f}{speed[2]:>10.0f}"
              f"{wall[0]:>11.2f}{wall[1]:>12.2f}{wall[2]:>10.2f}", flush=True)
        # Whole-run ratios are seconds the other way round, so that above 1 is faster too.
        print(f"{'':<20}mgpu_tf / hand loop = {speed[2] / speed[0]:.3f} by steps, "
              f"{wall[0] / wall[2]:.3f} by whole run; mgpu_tf / hand + fit = "
              f"{speed[2] / speed[1]:.3f} by steps, {wall[1] / wall[2]:.3f} by whole run",
              flush=True)


if __name__ == "__main__":
    main()
