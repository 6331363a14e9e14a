"""A two-worker training job that loses a worker: for bench_failures.py and the tests.

Run as 2 workers (`mgpu_tf.cluster.launcher`, or `run_with_a_kill`):

    python benchmarks/failure_worker.py OUT_DIR [KILL_WORKER KILL_EPOCH KILL_BATCH]

trains 3 epochs of 8 steps with BackupAndRestore in OUT_DIR/backup, appends each
step's (start, epoch, batch) to OUT_DIR/steps-<worker>.txt and writes the chief's
final weights to OUT_DIR/final.npz (read them back with `weights`). Worker
KILL_WORKER SIGKILLs itself after that step, on the group's first start only
(MGPU_TF_RESTART=0), so a restart resumes. MGPU_TF_BENCH_TIMEOUT sets
`timeout_seconds` (default 5), MGPU_TF_TEST_TRANSPORT the transport (default
tensorflow).

It lives here, not under tests/, because the failure benchmark runs it and
nothing outside tests/ imports from there; tests/test_reliability.py imports it.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import typing

import numpy as np

__all__ = ["EPOCHS", "KillRun", "STEPS_PER_EPOCH", "run_with_a_kill", "weights"]

EXAMPLES, FEATURES, GLOBAL_BATCH, EPOCHS = 256, 8, 32, 3
STEPS_PER_EPOCH = EXAMPLES // GLOBAL_BATCH


def weights(path):
    """The arrays of an `.npz` file written by `np.savez(path, *arrays)`, in order."""
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


class KillRun(typing.NamedTuple):
    """One `run_with_a_kill`: its TF_CONFIGs, processes and survivor's output, and the
    seconds from the death until the survivor named the lost worker (`None` if it never
    did) and until it stopped."""

    configs: list
    processes: list
    output: str
    named: float | None
    stopped: float


def run_with_a_kill(out, env, *, death_timeout, stop_timeout):
    """Trains on 2 workers, started by hand, where worker 1 SIGKILLs itself at epoch 0, batch 3.

    Returns a `KillRun`; both processes are gone on return.
    """
    from mgpu_tf.cluster import launcher

    configs = launcher.worker_tf_configs(2)
    processes = [
        subprocess.Popen([sys.executable, str(pathlib.Path(__file__).resolve()), str(out),
                          "1", "0", "3"],
                         env=dict(env, TF_CONFIG=json.dumps(c)), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
        for c in configs]
    lines, named = [], []

    def read():  # the survivor's lines, and when it named the lost worker
        for line in processes[0].stdout:
            lines.append(line)
            if not named and "WorkerLostError: worker 1 (" in line:
                named.append(time.monotonic())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        processes[1].wait(timeout=death_timeout)
        died = time.monotonic()
        processes[0].wait(timeout=stop_timeout)
        stopped = time.monotonic() - died
        reader.join(timeout=stop_timeout)
    finally:
        for p in processes:
            p.kill()
            p.wait()
    return KillRun(configs, processes, "".join(lines),
                   named[0] - died if named else None, stopped)


def _data():
    import tensorflow as tf

    rng = np.random.default_rng(3)
    x = rng.standard_normal((EXAMPLES, FEATURES)).astype("float32")
    y = (x @ rng.standard_normal((FEATURES, 1))).astype("float32")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).with_options(options)


def _model():
    import keras

    keras.utils.set_random_seed(11)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(16, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")
    return model


def _steps_callback(out, index, kill):
    """Records every step and kills this worker at the chosen one."""
    import keras

    class Steps(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.start = os.environ.get("MGPU_TF_RESTART", "0")

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            with open(out / f"steps-{index}.txt", "a") as f:
                f.write(f"{self.start} {self.epoch} {batch}\n")
            if kill and self.start == "0" and kill == (index, self.epoch, batch):
                os.kill(os.getpid(), signal.SIGKILL)

    return Steps()


def main():
    import mgpu_tf
    from mgpu_tf import callbacks
    from mgpu_tf.cluster import failures

    out = pathlib.Path(sys.argv[1])
    kill = tuple(int(v) for v in sys.argv[2:5]) if len(sys.argv) > 4 else None
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    out.mkdir(parents=True, exist_ok=True)
    timeout = float(os.environ.get("MGPU_TF_BENCH_TIMEOUT", "5"))
    transport = os.environ.get("MGPU_TF_TEST_TRANSPORT", "tensorflow")
    strategy = mgpu_tf.make_strategy("multi_worker", timeout_seconds=timeout, transport=transport)
    with strategy.scope():
        model = mgpu_tf.prepare_model(_model(), strategy)
    with failures.worker_failures():
        model.fit(_data(), epochs=EPOCHS, verbose=0, callbacks=[
            callbacks.BackupAndRestore(str(out / "backup")), _steps_callback(out, index, kill)])
    if callbacks.is_chief(strategy):
        np.savez(out / "final.npz", *model.get_weights())
    print(f"worker {index} finished", flush=True)


if __name__ == "__main__":
    main()
