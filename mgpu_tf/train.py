"""The main training job: `python -m mgpu_tf.train [--strategy=...]`.

Trains a small Keras classifier under the strategy the flags choose, on the bundled 8x8
digits or synthetic data, and ends with one line, its fields described in docs/cli.md:

    done: strategy=NAME replicas=N examples_per_sec=X steps_examples_per_sec=S \
          fit_seconds=F test_loss=Y test_accuracy=Z

Example: mgpu-tf launch --workers 2 -- python -m mgpu_tf.train --strategy=multi_worker
"""

import math
import numbers
import sys
import time

from mgpu_tf.compat import native_logs


def _check_strategy_flag(argv):
    """Ends the job on an unknown `--strategy` as absl would, before TensorFlow loads."""
    from mgpu_tf.strategies import factory

    arguments = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    given = [(arg.partition("=")[2] if "=" in arg else next(iter(arguments[i + 1:]), ""))
             for i, arg in enumerate(arguments)
             if arg.startswith("-") and arg.lstrip("-").partition("=")[0] == "strategy"]
    if not given:
        return
    try:
        factory.check_strategy_name(given[-1])  # absl keeps the last
    except ValueError as error:
        print(f"FATAL Flags parsing error: flag --strategy={given[-1]}: {error}\n"
              "Pass --helpshort or --helpfull to see help on flags.", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    _check_strategy_flag(sys.argv)
    native_logs.setup_logging()  # before TensorFlow loads: its own lines stay out of the log


import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

from mgpu_tf import callbacks  # noqa: E402
from mgpu_tf.callbacks import backup  # noqa: E402
from mgpu_tf.callbacks import metrics  # noqa: E402
from mgpu_tf import flags as mgpu_flags  # noqa: E402
from mgpu_tf.cluster import detect as cluster  # noqa: E402
from mgpu_tf.cluster import failures  # noqa: E402
from mgpu_tf.data import sharding  # noqa: E402
from mgpu_tf.data.digits import load_digits  # noqa: E402
from mgpu_tf.strategies import factory as strategies  # noqa: E402

__all__ = ["check_learning_rate", "load_data", "build_model", "train", "main"]

mgpu_flags.define_flags()
_EPOCHS = flags.DEFINE_integer("epochs", 3, "Passes over the training data.", lower_bound=1)
_GLOBAL_BATCH = flags.DEFINE_integer("global_batch_size", 64,
                                     "Examples per step over all replicas.", lower_bound=1)
_DATASET = flags.DEFINE_enum("dataset", "digits", ["digits", "synthetic"],
                             "digits: the bundled 8x8 digits; synthetic: "
                             "random data for benchmarks.")
_EXAMPLES = flags.DEFINE_integer("synthetic_examples", 16384,
                                 "Examples in the synthetic data set.", lower_bound=1)
_WIDTH = flags.DEFINE_integer("width", 256, "Width of the hidden layers.", lower_bound=1)
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 0.01,
                                    "SGD learning rate: a finite number above 0.")
flags.register_validator("learning_rate", lambda value: _flag_check(check_learning_rate, value))
_SEED = flags.DEFINE_integer("seed", 0, "Seed for weights, shuffling and synthetic data.")
_MONITOR = flags.DEFINE_bool(
    "monitor", False, "Show each worker's step, compute and wait times, examples/s, memory "
    "and the straggler ratio in the logs, and a table at the end (chief).")
_SHARD_WEIGHTS = flags.DEFINE_enum(
    "shard_weights", "deployment", ["deployment", "even", "adaptive"],
    "deployment: the workers' MGPU_TF_SHARD_WEIGHTS when set, else even; even; adaptive: "
    "follow each worker's measured speed between epochs (starting from the deployment's "
    "weights when set).")
_METRICS_PORT = flags.DEFINE_integer(
    "metrics_port", None, "Serve the monitor's figures for Prometheus on this port (worker i "
    "of a host: this port + i); turns on --monitor. Default: MGPU_TF_METRICS_PORT when set "
    "(mgpu-tf k8s --metrics_port sets it), else none.", lower_bound=0, upper_bound=65535)
_METRICS_HOST = flags.DEFINE_string(
    "metrics_host", None, "Address the metrics endpoint binds. Default: MGPU_TF_METRICS_HOST "
    "when set, else 127.0.0.1.")
_BACKUP_DIR = flags.DEFINE_string(
    "backup_dir", None, "Back up training state here each epoch (chief only) and resume "
    "from it after a restart, e.g. under mgpu-tf launch --max_restarts.")
flags.register_validator(
    "backup_dir", lambda value: not value or _flag_check(backup.check_backup_dir, value))


def check_learning_rate(value):
    """Returns `value` as a float, or raises for one that cannot train (not finite, not above 0).

    A zero or negative rate never lowers the loss and a NaN one makes every weight NaN, yet
    either trains to the end: the job would report `test_loss=nan` and succeed.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"`learning_rate` must be a number. Received: learning_rate={value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            "`learning_rate` must be a finite number above 0. Received: "
            f"learning_rate={value!r}. Use a small positive rate such as 0.01.")
    return float(value)


def _flag_check(check, value):
    try:
        check(value)
    except (TypeError, ValueError) as error:
        raise flags.ValidationError(str(error)) from None
    return True


def load_data(name, *, examples=16384, seed=0):
    """Returns `((x_train, y_train), (x_test, y_test))` as float32 / int32 arrays.

    `name` is `"digits"` (1,797 real 8x8 images, no download) or `"synthetic"` (`examples`
    of them); `seed` seeds the split and the synthetic data.
    """
    rng = np.random.default_rng(seed)
    if name == "digits":
        images, labels = load_digits()
        x = images.astype("float32") / 16
        y = labels.astype("int32")
    elif name == "synthetic":
        x = rng.standard_normal((examples, 784)).astype("float32")
        y = rng.integers(0, 10, size=examples).astype("int32")
    else:
        raise ValueError(f"`dataset` must be 'digits' or 'synthetic'. Received: {name!r}")
    order = rng.permutation(len(x))
    cut = int(len(x) * 0.85)
    return (x[order[:cut]], y[order[:cut]]), (x[order[cut:]], y[order[cut:]])


def build_model(input_dim, num_classes, *, width=256, seed=0):
    """A small MLP classifier: three hidden ReLU layers."""
    initializer = keras.initializers.GlorotUniform(seed=seed)
    return keras.Sequential([
        keras.Input((input_dim,)),
        keras.layers.Dense(width, activation="relu", kernel_initializer=initializer),
        keras.layers.Dense(width, activation="relu", kernel_initializer=initializer),
        keras.layers.Dense(width, activation="relu", kernel_initializer=initializer),
        keras.layers.Dense(num_classes, kernel_initializer=initializer),
    ])


class _Throughput(keras.callbacks.Callback):
    """Times the fit: its wall clock, and its steps alone, from the second epoch on.

    The first epoch traces the step; it counts only in `fit_seconds` when others follow.
    """

    def __init__(self, examples_per_epoch):
        super().__init__()
        self.examples_per_epoch = examples_per_epoch
        self._epoch_starts, self._step_seconds = [], []

    def on_train_begin(self, logs=None):
        self._fit_start = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_starts.append(time.perf_counter())
        self._step_seconds.append(0.0)

    def on_train_batch_begin(self, batch, logs=None):
        self._step_start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self._step_seconds[-1] += time.perf_counter() - self._step_start

    def on_train_end(self, logs=None):
        self.fit_seconds = time.perf_counter() - self._fit_start

    def _timed(self):
        """`(epochs, their wall-clock seconds, their step seconds)`, the first left out."""
        skip = 1 if len(self._epoch_starts) > 1 else 0
        start = self._epoch_starts[skip] if skip else self._fit_start
        return (len(self._epoch_starts) - skip, self._fit_start + self.fit_seconds - start,
                sum(self._step_seconds[skip:]))

    @property
    def examples_per_sec(self):
        epochs, seconds, _ = self._timed()
        return self.examples_per_epoch * epochs / seconds

    @property
    def steps_examples_per_sec(self):
        epochs, _, steps = self._timed()
        return self.examples_per_epoch * epochs / steps


def _dataset(x, y, global_batch_size, strategy, *, shuffle_seed=None, training=True,
             shard_weights="deployment"):
    """The examples as `model.fit` takes them under `strategy`: shared out evenly, by
    the workers' speeds when the deployment sets them (MGPU_TF_SHARD_WEIGHTS), or
    adaptively (`mgpu_tf.data.adaptive`)."""
    weights = {"deployment": cluster.shard_weights, "even": lambda: None,
               "adaptive": lambda: "adaptive"}[shard_weights]()
    return sharding.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy,
                                  global_batch_size, shuffle_seed=shuffle_seed,
                                  weights=weights, training=training)


def _prepare(strategy, *, dataset, global_batch_size, width, learning_rate,
             synthetic_examples, seed, jit_compile, steps_per_execution,
             shard_weights="deployment"):
    """The compiled model and the sharded data: where bad input shows, before training."""
    learning_rate = check_learning_rate(learning_rate)
    (x_train, y_train), (x_test, y_test) = load_data(dataset, examples=synthetic_examples,
                                                     seed=seed)
    train_data = _dataset(x_train, y_train, global_batch_size, strategy, shuffle_seed=seed,
                          shard_weights=shard_weights)
    test_data = _dataset(x_test, y_test, global_batch_size, strategy, training=False)
    keras.utils.set_random_seed(seed)
    with strategy.scope():
        model = build_model(x_train.shape[1], 10, width=width, seed=seed)
        model = strategies.prepare_model(model, strategy)
        model.compile(
            optimizer=keras.optimizers.SGD(learning_rate=learning_rate, momentum=0.9),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            jit_compile=jit_compile,
            steps_per_execution=steps_per_execution,
        )
    return model, train_data, test_data, len(x_train)


def _fit(strategy, prepared, *, epochs, verbose, backup_dir, monitor=False,
         global_batch_size=None, metrics_port=None, metrics_host="127.0.0.1"):
    model, train_data, test_data, examples = prepared
    throughput = _Throughput(examples)
    # Either one makes each epoch's order a function of the seed and the epoch only, so
    # every strategy, and a resumed run, sees the order of the default strategy.
    fit_callbacks = [throughput, callbacks.BackupAndRestore(backup_dir) if backup_dir
                     else callbacks.DataOrder()]
    if monitor or metrics_port is not None:
        # Before the backup: it decides adaptive shares, which the backup keeps.
        fit_callbacks.insert(1, callbacks.TrainingMonitor(
            global_batch_size=global_batch_size, metrics_port=metrics_port,
            metrics_host=metrics_host))
    with failures.worker_failures():
        # The data set is shuffled already (shard_dataset's shuffle_seed); Keras' own
        # shuffle=True would only warn that it cannot shuffle a data set.
        model.fit(train_data, epochs=epochs, verbose=verbose, callbacks=fit_callbacks,
                  shuffle=False)
        loss, accuracy = model.evaluate(test_data, verbose=0)
    return {
        "strategy": strategies.strategy_kind(strategy),
        "replicas": strategy.num_replicas_in_sync,
        "examples_per_sec": throughput.examples_per_sec,
        "steps_examples_per_sec": throughput.steps_examples_per_sec,
        "fit_seconds": throughput.fit_seconds,
        "test_loss": float(loss),
        "test_accuracy": float(accuracy),
    }


def train(strategy, *, dataset="digits", epochs=3, global_batch_size=64, width=256,
          learning_rate=0.01, synthetic_examples=16384, seed=0, verbose=1, backup_dir=None,
          jit_compile="auto", steps_per_execution=1, monitor=False,
          shard_weights="deployment", metrics_port=None, metrics_host="127.0.0.1"):
    """Trains the job's model under `strategy`; returns a dictionary of results.

    The options are the flags of the same names (`jit_compile` and `steps_per_execution` go to
    `model.compile`). Returns `{"strategy", "replicas", "examples_per_sec",
    "steps_examples_per_sec", "fit_seconds", "test_loss", "test_accuracy"}` (the first three
    as in the module's docstring).
    """
    prepared = _prepare(strategy, dataset=dataset, global_batch_size=global_batch_size,
                        width=width, learning_rate=learning_rate,
                        synthetic_examples=synthetic_examples, seed=seed,
                        jit_compile=jit_compile, steps_per_execution=steps_per_execution,
                        shard_weights=shard_weights)
    return _fit(strategy, prepared, epochs=epochs, verbose=verbose, backup_dir=backup_dir,
                monitor=monitor or shard_weights == "adaptive",
                global_batch_size=global_batch_size, metrics_port=metrics_port,
                metrics_host=metrics_host)


def format_result(result):
    """The job's last line."""
    return (f"done: strategy={result['strategy']} replicas={result['replicas']} "
            f"examples_per_sec={result['examples_per_sec']:.1f} "
            f"steps_examples_per_sec={result['steps_examples_per_sec']:.1f} "
            f"fit_seconds={result['fit_seconds']:.2f} "
            f"test_loss={result['test_loss']:.4f} test_accuracy={result['test_accuracy']:.4f}")


def _metrics_options():
    """`--metrics_port` and `--metrics_host`, or the pod's MGPU_TF_METRICS_* when unset."""
    port, host = _METRICS_PORT.value, _METRICS_HOST.value
    if port is None and cluster.environ_value("MGPU_TF_METRICS_PORT"):
        text = cluster.environ_value("MGPU_TF_METRICS_PORT")
        try:
            port = metrics.check_port(int(text))
        except ValueError:
            raise ValueError("MGPU_TF_METRICS_PORT must be a port number from 0 to 65535. "
                             f"Received: MGPU_TF_METRICS_PORT={text!r}.") from None
    return {"metrics_port": port,
            "metrics_host": host or cluster.environ_value("MGPU_TF_METRICS_HOST") or "127.0.0.1"}


def main(argv):
    """Runs the job from its flags. Bad input that only shows once the flags are parsed
    (no TPU, a device that is not there, too small a global batch) ends it with one
    line and exit code 1, as a bad flag does."""
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    try:
        metrics_options = _metrics_options()
        strategy = mgpu_flags.make_strategy_from_flags()
        prepared = _prepare(strategy, dataset=_DATASET.value,
                            global_batch_size=_GLOBAL_BATCH.value, width=_WIDTH.value,
                            learning_rate=_LEARNING_RATE.value,
                            synthetic_examples=_EXAMPLES.value, seed=_SEED.value,
                            shard_weights=_SHARD_WEIGHTS.value,
                            **mgpu_flags.compile_options())
    except (ValueError, TypeError) as error:
        print(f"FATAL mgpu_tf.train: {error}", file=sys.stderr, flush=True)
        sys.exit(1)
    # Adaptive shards move at the monitor's measurements.
    try:
        result = _fit(strategy, prepared, epochs=_EPOCHS.value, verbose=1,
                      backup_dir=_BACKUP_DIR.value,
                      monitor=_MONITOR.value or _SHARD_WEIGHTS.value == "adaptive",
                      global_batch_size=_GLOBAL_BATCH.value, **metrics_options)
    except metrics.MetricsPortError as error:
        print(f"FATAL mgpu_tf.train: {error}", file=sys.stderr, flush=True)
        sys.exit(1)
    print(format_result(result), flush=True)


if __name__ == "__main__":
    app.run(main)
