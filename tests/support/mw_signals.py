"""Two workers train under Keras' own callbacks, or until a signal stops them.

    python -m support.mw_signals callbacks OUT_DIR
    python -m support.mw_signals stop OUT_DIR [multi_worker|hybrid]

`callbacks`: a fit with each of Keras' `ModelCheckpoint`, `TensorBoard` and
`BackupAndRestore`, whose refusals each worker prints; then 2 epochs with the toolkit's
`ModelCheckpoint` (OUT_DIR/toolkit.keras) and `TensorBoard` (OUT_DIR/logs); the chief writes
its final weights to OUT_DIR/final.npz. `stop`: epochs without end under `mgpu_tf.callbacks.BackupAndRestore`
(OUT_DIR/backup, every 1000 steps), each worker appending a line to OUT_DIR/steps-INDEX
after each step, until a signal ends it; under `hybrid`, a pipeline of two simulated
devices in each worker.
"""

import json
import os
import pathlib
import sys

import keras
import numpy as np

import mgpu_tf
from mgpu_tf import callbacks
from mgpu_tf.cluster import stopping
from support import regression

EXAMPLES, FEATURES, GLOBAL_BATCH = 64, 6, 16


class _Steps(keras.callbacks.Callback):
    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_train_batch_end(self, batch, logs=None):
        with open(self.path, "a") as f:
            f.write(f"{batch}\n")


def main():
    mode, out = sys.argv[1], pathlib.Path(sys.argv[2])
    kind = sys.argv[3] if len(sys.argv) > 3 else "multi_worker"
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    if kind == "hybrid":
        mgpu_tf.simulate_devices(2)
        strategy = mgpu_tf.make_strategy("hybrid", devices_per_worker=2)
    else:
        strategy = mgpu_tf.make_strategy("multi_worker")
    data = regression.sharded(strategy, EXAMPLES, FEATURES, GLOBAL_BATCH, shuffle_seed=3)
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential([keras.Input((FEATURES,)),
                                  keras.layers.Dense(8, activation="tanh"),
                                  keras.layers.Dense(1)])
        model = mgpu_tf.prepare_model(model, strategy)
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    if mode == "stop":
        # TensorFlow's preemption notifier had SIGTERM: the handler installed calls it.
        displaced = sorted(int(s) for s in stopping.installed().displaced)
        print(f"displaced: {displaced}", file=sys.stderr, flush=True)
        model.fit(data, epochs=10_000, verbose=0, callbacks=[
            callbacks.BackupAndRestore(out / "backup", save_freq=1000),
            _Steps(out / f"steps-{index}")])
        return
    for keras_callback in (keras.callbacks.ModelCheckpoint(str(out / "keras.keras")),
                           keras.callbacks.TensorBoard(str(out / "klogs")),
                           keras.callbacks.BackupAndRestore(str(out / "kbackup"))):
        try:
            model.fit(data, epochs=1, verbose=0, callbacks=[keras_callback])
        except ValueError as error:
            print(f"refused: {error}")
    model.fit(data, epochs=2, verbose=0, callbacks=[
        callbacks.ModelCheckpoint(str(out / "toolkit.keras")),
        callbacks.TensorBoard(str(out / "logs"))])
    if callbacks.is_chief(strategy):
        np.savez(out / "final.npz", *model.get_weights())


if __name__ == "__main__":
    main()
