"""Worker script: Keras' `fit` and `evaluate` on one of 2 workers of `make_strategy("multi_worker")`.

    python -m keras_guard.two_workers DATA.npz OUT_FOLDER

`paths_test.py` starts two of these through mgpu_tf's launcher: between steps Keras reads and
resets its metrics eagerly, which is where `metric_reads` acts, and only under several workers.
DATA.npz holds `x`, `y`, the initial kernel `w`, `batch` (global) and `epochs`; each worker
writes OUT_FOLDER/worker<index>.json: its History, `evaluate`'s loss and its final kernel.
With `KERAS_GUARD_COVERAGE` set, each records which lines of mgpu_tf/compat ran into
`$KERAS_GUARD_COVERAGE.worker<index>`, which the reach report reads beside the run's own file.
"""

import json
import os
import pathlib
import sys

__all__ = ["COVERAGE_VARIABLE", "main"]

COVERAGE_VARIABLE = "KERAS_GUARD_COVERAGE"


def _index():
    return json.loads(os.environ["TF_CONFIG"])["task"]["index"]


def _recorder():
    """A started coverage recorder of mgpu_tf/compat, or None without `COVERAGE_VARIABLE`."""
    data_file = os.environ.get(COVERAGE_VARIABLE)
    if not data_file:
        return None
    import coverage

    import mgpu_tf

    compat = os.path.join(os.path.dirname(mgpu_tf.__file__), "compat")
    recorder = coverage.Coverage(data_file=f"{data_file}.worker{_index()}",
                                 include=[f"{compat}/*.py"])
    recorder.start()
    return recorder


def main(data_path, out_folder):
    recorder = _recorder()
    import keras
    import numpy as np
    import tensorflow as tf

    import mgpu_tf

    strategy = mgpu_tf.make_strategy("multi_worker")
    data = np.load(data_path)
    x, y, w = data["x"], data["y"], data["w"]
    batch, epochs = int(data["batch"]), int(data["epochs"])
    with strategy.scope():
        inputs = keras.Input((x.shape[1],))
        outputs = keras.layers.Dense(1, use_bias=False,
                                     kernel_initializer=keras.initializers.Constant(w))(inputs)
        model = keras.Model(inputs, outputs)
        model.compile(keras.optimizers.SGD(0.1), "mse")
    examples = tf.data.Dataset.from_tensor_slices((x, y))
    history = model.fit(mgpu_tf.shard_dataset(examples, strategy, batch), epochs=epochs,
                        verbose=0)
    loss = model.evaluate(mgpu_tf.shard_dataset(examples, strategy, batch, training=False),
                          verbose=0)
    if recorder is not None:
        recorder.stop()
        recorder.save()
    result = {"history": {k: [float(v) for v in values] for k, values in history.history.items()},
              "evaluate": float(loss), "kernel": model.get_weights()[0].tolist()}
    (pathlib.Path(out_folder) / f"worker{_index()}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
