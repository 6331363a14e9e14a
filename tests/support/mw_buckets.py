"""Worker script: `bucket_bytes` on one pair of workers, checked several ways.

Usage: `python -m support.mw_buckets OUT_DIR [tcp|nccl]`. Under make_strategy("multi_worker",
transport="tcp", bucket_bytes=BUCKET_BYTES), each worker trains with `model.fit`:

- `timed`: the MLP of `build_timed`, in buckets over the tcp ring, recording when each
  bucket's exchange starts (the communication thread's timeline) and when the first
  layer's kernel gradient, the last one computed, exists (`STAMPS`);
- `timed_whole`: the same, all-reduced at once over the ring;
- `<case>` and `<case>_whole` for each case of `CASES`, on `mw_equivalence`'s model:
  in buckets and all at once, with that case's communication and compile options.

With `nccl` (one GPU per worker, TensorFlow's collectives over NCCL) only the two timed
runs, without the timeline. Each worker writes OUT_DIR/worker<index>.npz: `<run>/<i>` the final weights of each run,
`timeline` (ticket, bytes, enqueued, started, finished), `stamps`, and `exchanges/<run>`
the bucket exchanges of the communication thread during each later run.
"""

import pathlib
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from support import mw_equivalence

# Small enough that the models of both parts get several buckets.
BUCKET_BYTES = 1 << 20
STEPS = 4
GLOBAL_BATCH = 512
FEATURES, WIDTH = 2048, 512
LEARNING_RATE = 0.05
# (name, prepare.install options besides transport="tcp", compile options).
CASES = (
    ("float16", {"compression": "float16"}, {}),
    ("steps_per_sync", {"steps_per_sync": 2}, {}),
    ("jit", {}, {"jit_compile": True, "steps_per_execution": 2}),
    ("collectives", {"transport": "tensorflow"}, {}),
)
SMALL_BUCKET_BYTES = 64  # mw_equivalence's model has 481 weights

STAMPS = []  # perf_counter() of each step when the first layer's kernel gradient exists


def _record(gradient):
    STAMPS.append(time.perf_counter())
    return gradient


@tf.custom_gradient
def _stamped(kernel):
    def gradient(upstream):
        out = tf.numpy_function(_record, [upstream], upstream.dtype, stateful=False)
        out.set_shape(upstream.shape)
        return out

    return tf.identity(kernel), gradient


class StampedDense(keras.layers.Layer):
    """A ReLU Dense layer whose kernel gradient passes `_record` on its way to the optimizer."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), name="kernel")
        self.bias = self.add_weight(shape=(self.units,), initializer="zeros", name="bias")

    def call(self, inputs):
        kernel = _stamped(tf.convert_to_tensor(self.kernel))
        return tf.nn.relu(tf.matmul(inputs, kernel) + self.bias)


def build_timed(weights=None):
    """The MLP whose first layer is stamped (uncompiled); `weights` to start from."""
    model = keras.Sequential([
        keras.Input((FEATURES,)),
        StampedDense(WIDTH),
        keras.layers.Dense(WIDTH, activation="relu"),
        keras.layers.Dense(WIDTH, activation="relu"),
        keras.layers.Dense(1),
    ])
    if weights is not None:
        model.set_weights(weights)
    return model


def timed_problem():
    """`(x, y, initial weights)` of the timed runs, the same in every process."""
    rng = np.random.RandomState(3)
    x = rng.normal(size=(STEPS * GLOBAL_BATCH, FEATURES)).astype("float32")
    y = np.tanh(x[:, :1] - x[:, 1:2]).astype("float32")
    weights = [rng.normal(scale=(2.0 / w.shape[0]) ** 0.5 if w.ndim == 2 else 0.0,
                          size=w.shape).astype("float32") for w in build_timed().get_weights()]
    return x, y, weights


def small_problem():
    """`(x, y, initial weights)` of the cases on mw_equivalence's model."""
    rng = np.random.RandomState(11)
    x = rng.normal(size=(4 * 8, 5)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.5 * x[:, 1:2]).astype("float32")
    shapes = [w.shape for w in mw_equivalence.build_model(None).get_weights()]
    return x, y, [rng.normal(scale=0.5, size=s).astype("float32") for s in shapes]


def _exchanges(strategy):
    """Bucket exchanges of this worker's communication thread so far (0 without one)."""
    import mgpu_tf

    connection = mgpu_tf.kind_of(strategy).connection
    return 0 if connection is None or connection.buckets is None else len(
        connection.buckets.timeline)


def _train(strategy, model, problem, batch, learning_rate, install, compile_options):
    from mgpu_tf.comm import prepare

    x, y, _ = problem
    with strategy.scope():
        optimizer = keras.optimizers.SGD(learning_rate)
        # Before compile, which then leaves the optimizer as installed here.
        prepare.install(optimizer, strategy, **install)
        model.compile(optimizer=optimizer, loss="mse", **compile_options)
    model.fit(mw_equivalence.global_batches(x, y, batch), epochs=1, shuffle=False, verbose=0)
    return model.get_weights()


def _nccl_strategy(task_index):
    """multi_worker over NCCL, each worker on its own GPU (both see every GPU of the host)."""
    import mgpu_tf

    gpus = tf.config.list_physical_devices("GPU")
    tf.config.set_visible_devices(gpus[task_index % len(gpus)], "GPU")
    tf.config.experimental.enable_tensor_float_32_execution(False)  # full float32 products
    return mgpu_tf.make_strategy("multi_worker", all_reduce="nccl", bucket_bytes=BUCKET_BYTES)


def main(out_dir, path="tcp"):
    """Trains the runs of `path`: `"tcp"` (every run) or `"nccl"` (the timed ones, on GPUs)."""
    import mgpu_tf
    from mgpu_tf.cluster import detect as cluster

    index = cluster.detect_cluster().task_index
    if path == "nccl":
        strategy, wire = _nccl_strategy(index), {"transport": "tensorflow"}
    else:
        wire = {"transport": "tcp"}
        strategy = mgpu_tf.make_strategy("multi_worker", bucket_bytes=BUCKET_BYTES, **wire)
    runs, timeline, exchanges = {}, [], {}
    timed = timed_problem()
    with strategy.scope():
        model = build_timed(timed[2])
    runs["timed"] = _train(strategy, model, timed, GLOBAL_BATCH, LEARNING_RATE,
                           dict(wire, bucket_bytes=BUCKET_BYTES), {})
    connection = mgpu_tf.kind_of(strategy).connection
    if connection is not None:
        timeline = list(connection.buckets.timeline)
    stamps = list(STAMPS)
    with strategy.scope():
        model = build_timed(timed[2])
    before = _exchanges(strategy)
    runs["timed_whole"] = _train(strategy, model, timed, GLOBAL_BATCH, LEARNING_RATE, wire, {})
    exchanges["timed_whole"] = _exchanges(strategy) - before
    small = small_problem()
    for name, install, compile_options in CASES if path == "tcp" else ():
        for suffix, bucket_bytes in (("", SMALL_BUCKET_BYTES), ("_whole", 0)):
            with strategy.scope():
                model = mw_equivalence.build_model(small[2])
            before = _exchanges(strategy)
            runs[name + suffix] = _train(
                strategy, model, small, 8, mw_equivalence.LEARNING_RATE,
                dict(wire, **install, bucket_bytes=bucket_bytes), compile_options)
            exchanges[name + suffix] = _exchanges(strategy) - before
    np.savez(pathlib.Path(out_dir) / f"worker{index}.npz",
             timeline=np.array(timeline, dtype="float64"), stamps=np.array(stamps),
             **{f"exchanges/{run}": n for run, n in exchanges.items()},
             **{f"{run}/{i}": w for run, weights in runs.items()
                for i, w in enumerate(weights)})
    print(f"worker {index}: {len(timeline)} bucket exchanges, {len(stamps)} stamps: done")


if __name__ == "__main__":
    main(*sys.argv[1:])
