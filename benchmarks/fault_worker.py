"""A two-worker training job with hooks for faults injected from outside: for bench_faults.py.

Run as the workers of `mgpu-tf launch` (plain, or elastic with `--workers 1:2`):

    python benchmarks/fault_worker.py OUT_DIR

trains `EPOCHS` epochs of `STEPS_PER_EPOCH` steps over `transport="tcp"` with Adam and
`BackupAndRestore(OUT_DIR/backup, save_freq=SAVE_FREQ)` (kept at the end, to be checked),
and the chief writes the final weights to OUT_DIR/final.npz. For the injector it

- writes its pid to OUT_DIR/pids/<start>-<worker> as it starts (`MGPU_TF_RESTART` is the
  start), and `start epoch batch` to OUT_DIR/progress-<worker> after each step;
- shuts down its tcp ring's sockets as soon as the file OUT_DIR/close-<start>-<worker>
  appears (a thread watches for it), as a cut network would;
- ignores SIGXFSZ, so that a file-size limit set on it (`prlimit`) makes a write fail
  with an `OSError`, as a full disk does, instead of killing it.

Each step sleeps `STEP_SECONDS`, so that faults land at moments spread over the steps.
MGPU_TF_BENCH_TIMEOUT sets `timeout_seconds` (default 3).
"""

import json
import os
import pathlib
import signal
import sys
import threading
import time

import numpy as np

__all__ = ["EPOCHS", "SAVE_FREQ", "STEPS_PER_EPOCH", "STEP_SECONDS", "TERMS", "weights"]

EXAMPLES, FEATURES, GLOBAL_BATCH, EPOCHS, SAVE_FREQ = 256, 8, 32, 6, 3
STEPS_PER_EPOCH = EXAMPLES // GLOBAL_BATCH
STEP_SECONDS = 0.03
HIDDEN = 16
# The length of the sums behind one gradient (`support.tolerance.training`'s `terms`):
# the widths passed forward and back, and the global batch's rows.
TERMS = FEATURES + 2 * HIDDEN + 1 + GLOBAL_BATCH


def weights(path):
    """The arrays of an `.npz` file written by `np.savez(path, *arrays)`, in order."""
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def _data():
    import tensorflow as tf

    rng = np.random.default_rng(3)
    x = rng.standard_normal((EXAMPLES, FEATURES)).astype("float32")
    y = (x @ rng.standard_normal((FEATURES, 1))).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y))


def _model():
    import keras

    keras.utils.set_random_seed(11)
    model = keras.Sequential([keras.Input((FEATURES,)),
                              keras.layers.Dense(HIDDEN, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    return model


def _progress(out, index, start):
    import keras

    class Progress(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            time.sleep(STEP_SECONDS)
            # Rewritten in place: a few bytes, below any file-size limit set as a fault.
            with open(out / f"progress-{index}", "w") as f:
                f.write(f"{start} {self.epoch} {batch}\n")

    return Progress()


def _watch_for_close(strategy, trigger):
    """Shuts the ring's sockets down once `trigger` exists."""
    from mgpu_tf.strategies import kinds

    def watch():
        # The ring is made at the first step: a trigger before it waits for it.
        while not trigger.exists() or kinds.kind_of(strategy).connection is None:
            time.sleep(0.01)
        kinds.kind_of(strategy).connection.ring.close()  # shuts both connections down
        print("fault: ring sockets shut down", flush=True)

    threading.Thread(target=watch, daemon=True).start()


def main():
    out = pathlib.Path(sys.argv[1])
    start = os.environ.get("MGPU_TF_RESTART", "0")
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    (out / "pids").mkdir(parents=True, exist_ok=True)
    (out / "pids" / f"{start}-{index}").write_text(str(os.getpid()))

    import mgpu_tf
    from mgpu_tf import callbacks
    from mgpu_tf.cluster import failures

    timeout = float(os.environ.get("MGPU_TF_BENCH_TIMEOUT", "3"))
    strategy = mgpu_tf.make_strategy("multi_worker", timeout_seconds=timeout, transport="tcp")
    _watch_for_close(strategy, out / f"close-{start}-{index}")
    with strategy.scope():
        model = mgpu_tf.prepare_model(_model(), strategy)
    data = mgpu_tf.shard_dataset(_data(), strategy, GLOBAL_BATCH, shuffle_seed=5)
    with failures.worker_failures():
        model.fit(data, epochs=EPOCHS, verbose=0, callbacks=[
            callbacks.BackupAndRestore(str(out / "backup"), save_freq=SAVE_FREQ,
                                       delete_checkpoint=False),
            _progress(out, index, start)])
    if callbacks.is_chief(strategy):
        with callbacks.chief_path(str(out / "final.npz"), strategy) as target:
            with open(target, "wb") as f:
                np.savez(f, *model.get_weights())
    print(f"worker {index} finished", flush=True)


if __name__ == "__main__":
    main()
