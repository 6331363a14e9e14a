"""Worker script: BatchNormalization's moving statistics under make_strategy("multi_worker").

Usage: `python -m support.mw_batch_norm OUT_DIR`. Trains `support.batch_norm_problem`
twice, its first layer frozen and then synchronized (`mgpu_tf.comm.batch_norm.synchronize`,
what `sync_batch_norm=True` does at compile); prints `statistics:` (moving mean and variance)
and `evaluate:` (the loss `evaluate` measures) of the first, and the chief writes each
model's weights to OUT_DIR/frozen.npz and OUT_DIR/synchronized.npz.
"""

import pathlib
import sys

import numpy as np
import tensorflow as tf

from support import batch_norm_problem as problem


def global_batches(x, y):
    """Global batches of the problem; DATA sharding gives each worker its half of each."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(problem.GLOBAL_BATCH)
    return dataset.with_options(options)


def main(out_dir):
    import mgpu_tf
    from mgpu_tf.comm import batch_norm

    out_dir = pathlib.Path(out_dir)
    strategy = mgpu_tf.make_strategy("multi_worker")
    chief = mgpu_tf.kind_of(strategy).is_chief
    x, y = problem.data()
    for name in ("frozen", "synchronized"):
        with strategy.scope():
            model = problem.build(frozen_first=name == "frozen")
            if name == "synchronized":
                batch_norm.synchronize(model)
        model.fit(global_batches(x, y), epochs=problem.EPOCHS, shuffle=False, verbose=0)
        if name == "frozen":
            bn = model.get_layer("bn")
            values = np.concatenate([bn.moving_mean.numpy(), bn.moving_variance.numpy()])
            print("statistics:", " ".join(f"{v:.9e}" for v in values))
            print(f"evaluate: {model.evaluate(global_batches(x, y), verbose=0):.9e}")
        if chief:
            np.savez(out_dir / f"{name}.npz", *model.get_weights())
    print("done")


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
