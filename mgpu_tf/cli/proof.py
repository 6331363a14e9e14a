"""What each row of `mgpu-tf test` runs in its own process, and the bound its weights meet.

Every row trains the same small classifier from the same weights on the same global
batches, so that a correct strategy ends on the default strategy's weights, to rounding.
"""

import math
import time

import numpy as np

__all__ = ["Problem", "hardware", "tolerance", "train_row"]

FEATURES, WIDTH, CLASSES = 16, 32, 4
LEARNING_RATE, MOMENTUM = 0.1, 0.9
WORKERS = 2  # the local workers of the multi-worker rows
_SIMULATED = 2  # devices split from the one CPU (or GPU) of a machine without several
_UNIT_ROUNDOFF = 2.0 ** -24  # float32
_CONFIDENCE = 5.0


def hardware(gpus):
    """What the rows on local devices use, given this machine's GPUs.

    Returns:
        `{"device_type", "devices", "simulate", "global_batch"}`: all GPUs when there are
        several, else 2 devices split from the one GPU or CPU; a global batch of 16 examples
        per replica that every row's replicas divide.
    """
    device_type = "GPU" if gpus else "CPU"
    devices, simulate = (gpus, 0) if gpus >= 2 else (_SIMULATED, _SIMULATED)
    return {"device_type": device_type, "devices": devices, "simulate": simulate,
            "global_batch": 16 * math.lcm(devices, WORKERS)}


class Problem:
    """The rows' model and data: a 3-layer classifier, `steps` global batches of `global_batch`."""

    def __init__(self, steps, global_batch, seed=0):
        self.steps, self.global_batch, self.seed = steps, global_batch, seed

    def data(self):
        """`(x, y)`: `steps * global_batch` examples of a fixed rule, as float32 and int32."""
        rng = np.random.default_rng(self.seed)
        x = rng.standard_normal((self.steps * self.global_batch, FEATURES)).astype("float32")
        y = np.argmax(x @ rng.standard_normal((FEATURES, CLASSES)), axis=1).astype("int32")
        return x, y

    def initial_weights(self):
        """Weights drawn from the seed, so that no strategy's initializers come into it."""
        rng = np.random.default_rng(self.seed + 1)
        shapes = [(FEATURES, WIDTH), (WIDTH,), (WIDTH, WIDTH), (WIDTH,), (WIDTH, CLASSES),
                  (CLASSES,)]
        # Kernels scaled by their fan-in, as Keras' LeCun initializers are; small biases.
        scales = [1 / math.sqrt(s[0]) if len(s) == 2 else 0.1 for s in shapes]
        return [(rng.standard_normal(s) * c).astype("float32") for s, c in zip(shapes, scales)]

    def terms(self):
        """The length of the sums behind one gradient: the widths forward and back, the batch."""
        return FEATURES + 2 * WIDTH + CLASSES + 2 * WIDTH + self.global_batch


def tolerance(problem, epochs):
    """The largest relative weight difference two correct runs of `problem` may show.

    Two correct runs differ only by rounding: replicas, micro-batches and all-reduces sum
    a gradient in another order. A sum of `n` float32 terms in any order is within
    `5 sqrt(n) u` of the exact one (u = 2**-24) with probability 1 - 7.5e-6 (Higham and
    Mary, SIAM J. Sci. Comput. 41(5), 2019); each step adds an independent error of that
    size, so `steps` steps add up as `sqrt(steps * terms)` terms do, twice over for the
    error fed back through the model. A 1% error in the learning rate is some 100 times
    larger after a few steps (`--skew_row` shows it). Measured as the largest difference
    over the largest weight of the default run.
    """
    steps = problem.steps * epochs
    return 2 * _CONFIDENCE * math.sqrt(steps * problem.terms()) * _UNIT_ROUNDOFF


def _strategy(row):
    """The row's strategy, and whether its gradients travel by NCCL."""
    from mgpu_tf.strategies import devices as devices_lib
    from mgpu_tf.strategies import factory

    if row["simulate"]:
        devices_lib.simulate_devices(row["simulate"], device_type=row["device_type"])
    options = dict(row["options"])
    if row["devices"]:
        options["devices"] = row["devices"]
    # NCCL needs distinct physical GPUs, which simulated ones are not.
    nccl = (row["strategy"] == "mirrored" and row["device_type"] == "GPU"
            and not row["simulate"] and devices_lib.nccl_available())
    if nccl:
        options["all_reduce"] = "nccl"
    return factory.make_strategy(row["strategy"], **options), nccl


def _devices(strategy, row):
    """How the row's devices read in the table: `2 x CPU (simulated)`, `2 workers x 1 CPU`."""
    import tensorflow as tf

    local = len(tf.config.list_logical_devices(row["device_type"]))
    used = row["devices"] or 1
    kind = row["device_type"] + (" (simulated)" if row["simulate"] else "")
    if row["workers"] > 1:
        return f"{row['workers']} workers x {used} {kind}"
    return f"{min(used, local)} x {kind}"


def _fit(strategy, problem, x, y, epochs, learning_rate, **compile_options):
    """Builds, compiles and trains the model under `strategy`; returns it and each epoch's s."""
    import keras
    import tensorflow as tf

    from mgpu_tf.data import sharding
    from mgpu_tf.strategies import factory

    with strategy.scope():
        model = keras.Sequential([keras.Input((FEATURES,)),
                                  keras.layers.Dense(WIDTH, activation="tanh"),
                                  keras.layers.Dense(WIDTH, activation="tanh"),
                                  keras.layers.Dense(CLASSES)])
        model.set_weights(problem.initial_weights())
        model = factory.prepare_model(model, strategy)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate, momentum=MOMENTUM),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      **compile_options)
    seconds = []

    class _Clock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            seconds.append(time.perf_counter() - self._start)

    examples = tf.data.Dataset.from_tensor_slices((x, y))
    history = model.fit(sharding.shard_dataset(examples, strategy, problem.global_batch),
                        epochs=epochs, verbose=0, callbacks=[_Clock()])
    return model, seconds, history.history["loss"][-1]


def train_row(row):
    """Trains the rows' model under `row`'s strategy in this fresh process.

    `row` is a dict: `name`, `strategy`, `options`, `devices` (an int or None),
    `simulate` (logical devices to split the first `device_type` device into, or 0),
    `device_type` (`CPU` or `GPU`), `workers`, `steps`, `global_batch`, `epochs`,
    `learning_rate_scale` and `fail` (raise before training, to show a failure). A
    `global_batch` of None asks this process to look at the hardware (`hardware`), for
    a row on one device.
    Returns `{"weights", "examples_per_sec", "devices", "replicas"}`, `hardware` when
    asked, and on GPUs `nccl`, `mixed_precision` and `xla`.
    """
    if row["fail"]:
        raise RuntimeError(f"row {row['name']!r} failed on purpose (--fail_row)")
    import keras
    import tensorflow as tf

    found = None
    if row["global_batch"] is None:  # the first row: it tells the others what there is
        found = hardware(len(tf.config.list_physical_devices("GPU")))
        row = dict(row, device_type=found["device_type"], global_batch=found["global_batch"])

    # Full float32 products on GPUs: TensorFloat-32 would round the default run differently.
    tf.config.experimental.enable_tensor_float_32_execution(False)
    strategy, nccl = _strategy(row)
    problem = Problem(row["steps"], row["global_batch"])
    x, y = problem.data()
    learning_rate = LEARNING_RATE * row["learning_rate_scale"]
    # The first epoch traces the step; the last one is timed.
    model, seconds, _ = _fit(strategy, problem, x, y, row["epochs"], learning_rate)
    result = {"weights": [w.tolist() for w in model.get_weights()],
              "examples_per_sec": problem.steps * problem.global_batch / seconds[-1],
              "devices": _devices(strategy, row),
              "replicas": strategy.num_replicas_in_sync}
    if found is not None:
        result["hardware"] = found
    if row["device_type"] == "GPU":
        result["nccl"] = "yes" if nccl else "no"
        result["mixed_precision"] = _switch_works(
            lambda: _mixed(strategy, problem, x, y, learning_rate))
        result["xla"] = _switch_works(
            lambda: _fit(strategy, problem, x, y, 1, learning_rate, jit_compile=True)[2])
        keras.mixed_precision.set_dtype_policy("float32")
    return result


def _mixed(strategy, problem, x, y, learning_rate):
    import keras

    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        return _fit(strategy, problem, x, y, 1, learning_rate)[2]
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


def _switch_works(train):
    """`yes` when one epoch under a speed switch ends on a finite loss, else `no: why`."""
    try:
        loss = train()
    except Exception as error:  # noqa: BLE001 - the table reports any failure
        return f"no: {type(error).__name__}: {str(error).splitlines()[0][:80]}"
    return "yes" if math.isfinite(loss) else f"no: loss {loss}"
