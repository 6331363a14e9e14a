"""Worker script: SGD steps of `model.fit` under multi_worker with communication options.

Usage: `python -m support.mw_communication DATA.npz OUT_DIR OPTIONS_JSON`. DATA.npz holds
`x`, `y`, `global_batch` and the initial weights `w0`, `w1`, ...; OPTIONS_JSON is
a JSON object of make_strategy options. Each worker writes its final weights,
the optimizer's update count and the loss logged after each batch to
OUT_DIR/worker<index>.npz.
"""

import json
import pathlib
import sys

import numpy as np

from support import mw_equivalence


def main(data_path, out_dir, options_json):
    import keras

    import mgpu_tf
    from mgpu_tf.cluster import detect as cluster

    strategy = mgpu_tf.make_strategy("multi_worker", **json.loads(options_json))
    data = np.load(data_path)
    weights = [data[f"w{i}"] for i in range(len(data.files) - 3)]
    with strategy.scope():
        # Compiled before prepare_model: the options go into its optimizer at once.
        model = mgpu_tf.prepare_model(mw_equivalence.build_model(weights), strategy)
    batch_losses = []
    logger = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: batch_losses.append(float(logs["loss"])))
    model.fit(mw_equivalence.global_batches(data["x"], data["y"], int(data["global_batch"])),
              epochs=1, shuffle=False, verbose=0, callbacks=[logger])
    index = cluster.detect_cluster().task_index
    np.savez(pathlib.Path(out_dir) / f"worker{index}.npz", *model.get_weights(),
             updates=int(model.optimizer.iterations.numpy()), batch_losses=batch_losses)
    ring = mgpu_tf.kind_of(strategy).connection is not None
    print(f"worker {index} of {strategy.num_replicas_in_sync} replicas: done over "
          + ("the tcp ring" if ring else "TensorFlow's collectives"))


if __name__ == "__main__":
    main(*sys.argv[1:])
