"""What one fresh process of the scaling benchmark (`mgpu-tf bench`) does: build, train, time.

Design: docs/design.md#the-scaling-benchmark
"""

import functools
import time
import zlib

import numpy as np

from mgpu_tf.planner.bench.settings import ModelSpec, Setting

__all__ = ["LINK_PROBE_BYTES", "train_and_time", "time_collectives"]

# The link is timed with at least this many bytes, so that the all-gather's time is not
# mostly the fixed cost per collective set against it: with a CNN's 0.4 MB of gradients it
# was, and the link came out at thousands of GB/s.
LINK_PROBE_BYTES = 8 << 20


def _reverse_all_reduce(optimizer):
    """Makes the optimizer all-reduce the last layers' gradients first."""
    from mgpu_tf.compat import private

    inner = optimizer.inner_optimizer if hasattr(optimizer, "inner_optimizer") else optimizer

    def reversed_order(original):
        return lambda grads_and_vars: list(reversed(original(list(reversed(list(
            grads_and_vars))))))

    private.wrap_optimizer_method(inner, "_all_reduce_sum_gradients", reversed_order)


def _build_model(spec):
    import keras

    layers = [keras.Input(spec.input_shape)]
    if spec.kind == "cnn":
        for i, filters in enumerate(spec.filters):
            if i >= 2:  # two layers at full size, then each at half the size before it
                layers.append(keras.layers.MaxPooling2D(2))
            layers.append(keras.layers.Conv2D(filters, 3, padding="same", activation="relu"))
        layers.append(keras.layers.GlobalAveragePooling2D())
    else:
        layers += [keras.layers.Dense(spec.width, activation="relu")
                   for _ in range(spec.depth - 1)]
    layers.append(keras.layers.Dense(spec.classes, dtype="float32"))
    return keras.Sequential(layers)


def _dataset(spec, batch):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch * 8, *spec.input_shape)).astype("float32")
    y = rng.integers(0, spec.classes, size=batch * 8).astype("int32")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return (tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True)
            .repeat().prefetch(tf.data.AUTOTUNE).with_options(options))


def time_collectives(strategy, model, wire, transport="tensorflow", repeats=20):
    """Seconds of collectives as the step sends them, for the cost model.

    `wire` is the gradients' dtype; `transport` is `"tensorflow"` or `"tcp"` (the toolkit's
    ring: the all-gather then is the ring's own, the second half of its all-reduce).

    Returns:
        `(all-reduce of the gradients, all-reduce of one number, all-gather of 1/N of the
        gradient bytes from each worker, the all-gather's bytes)`: seconds, then bytes. The
        all-gather moves half the ring all-reduce's bytes, with no arithmetic, and at least
        `LINK_PROBE_BYTES`.
    """
    import tensorflow as tf

    shapes = [tuple(w.shape) for w in model.trainable_weights]
    elements = max(sum(int(np.prod(s)) for s in shapes),
                   LINK_PROBE_BYTES // tf.as_dtype(wire).size)
    share = elements // strategy.num_replicas_in_sync
    if transport == "tcp":
        from mgpu_tf.comm import transport as transport_lib

        connection = transport_lib.connect(strategy)
        ring = connection.ring

    def timed(collective):
        @tf.function
        def once():
            return strategy.run(collective)

        once()
        start = time.perf_counter()
        for _ in range(repeats):
            out = once()
        tf.nest.map_structure(lambda t: strategy.experimental_local_results(t)[0].numpy(), out)
        return (time.perf_counter() - start) / repeats

    def all_reduce(shapes_):
        if transport == "tcp":
            size = sum(int(np.prod(s)) for s in shapes_)
            return lambda: transport_lib.ring_all_reduce(
                connection, tf.ones((size,), wire), f"bench {size}")
        return lambda: tf.distribute.get_replica_context().all_reduce(
            "SUM", [tf.ones(s, wire) for s in shapes_])

    def all_gather():
        if transport == "tcp":
            gather = functools.partial(ring.all_gather, op=zlib.crc32(b"bench all-gather"))
            return tf.numpy_function(gather, [tf.ones((share,), wire)], tf.as_dtype(wire),
                                     stateful=True)
        # The CPU all-gather has no bfloat16 kernel; float16 moves as many bytes.
        dtype = "float16" if wire == "bfloat16" else wire
        return tf.distribute.get_replica_context().all_gather(tf.ones((share,), dtype), axis=0)

    gathered = share * strategy.num_replicas_in_sync * tf.as_dtype(wire).size
    return timed(all_reduce(shapes)), timed(all_reduce([(1,)])), timed(all_gather), gathered


def _strategy(setting, options):
    from mgpu_tf.strategies import devices as devices_lib
    from mgpu_tf.strategies import factory

    if setting.mode == "process":
        return factory.make_strategy("default", **options)
    if setting.mode == "workers":
        if setting.defaults:
            return factory.make_strategy("multi_worker", **options)
        # A row without transport is TensorFlow's collectives' row, where "auto" could pick tcp.
        return factory.make_strategy("multi_worker", **{"transport": "tensorflow", **options})
    devices_lib.simulate_devices(setting.count)
    name = "mirrored" if setting.mode == "mirrored" else "model_parallel"
    return factory.make_strategy(name, devices=setting.count, **options)


def _transport_used(optimizer):
    """`"tcp"` when the optimizer's gradients take the tcp ring, else `"tensorflow"`."""
    from mgpu_tf.comm import optimizer_step

    while hasattr(optimizer, "inner_optimizer"):  # LossScaleOptimizer
        optimizer = optimizer.inner_optimizer
    hook = optimizer_step.find(optimizer)
    # (compression, steps_per_sync, transport) as comm.prepare installed them, if it did.
    return hook.communication[2] if hook and hook.communication else "tensorflow"


def train_and_time(payload):
    """Trains the benchmark's model under one setting, in this fresh process, and times it.

    `payload` is `{"setting": asdict(Setting), "spec": asdict(ModelSpec), "steps": n}`.
    Returns `{"examples_per_sec", "step_seconds"}` of the timed (second) epoch and
    `fit_seconds`, the whole `model.fit` of both epochs: what a user waits for, tracing and
    compiles included. On workers also `transport` (the one the gradients took: what
    `"auto"` chose, for the default options), `all_reduce_seconds`, `latency_seconds`,
    `gradient_bytes` and `transport_bandwidth`.
    """
    import keras
    import tensorflow as tf

    from mgpu_tf.strategies import factory

    setting, spec = Setting.from_dict(payload["setting"]), ModelSpec(**payload["spec"])
    steps = payload["steps"]
    tf.config.threading.set_intra_op_parallelism_threads(setting.threads)
    tf.config.threading.set_inter_op_parallelism_threads(setting.threads)
    options = dict(setting.options)
    overlap = options.pop("overlap", False)
    strategy = _strategy(setting, options)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = factory.prepare_model(_build_model(spec), strategy)
        model.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      **dict(setting.compile))
    if overlap:
        _reverse_all_reduce(model.optimizer)
    seconds = []

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            seconds.append(time.perf_counter() - self._start)

    # The first epoch traces and warms up; the second is timed alone, and the whole fit too.
    start = time.perf_counter()
    model.fit(_dataset(spec, setting.global_batch), epochs=2, steps_per_epoch=steps,
              verbose=0, callbacks=[Timer()])
    result = {"examples_per_sec": setting.global_batch * steps / seconds[-1],
              "step_seconds": seconds[-1] / steps,
              "fit_seconds": time.perf_counter() - start}
    if setting.mode == "workers":
        from mgpu_tf.planner import cost_model

        wire = options.get("compression", "float32")
        wire = "float32" if wire == "none" else wire
        result["transport"] = _transport_used(model.optimizer)
        (result["all_reduce_seconds"], result["latency_seconds"], gather_seconds,
         gathered) = time_collectives(strategy, model, wire, result["transport"])
        result["gradient_bytes"] = cost_model.gradient_bytes(model, wire)
        n = strategy.num_replicas_in_sync
        result["transport_bandwidth"] = (n - 1) / n * gathered / max(
            gather_seconds - result["latency_seconds"], 1e-9)
    return result
