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

from support import batch_norm_problem as problem
from support.mw_equivalence import global_batches



def main(out_dir):
    import mgpu_tf
    from mgpu_tf.comm import batch_norm

    out_dir = pathlib.Path(out_dir)
    strategy = mgpu_tf.make_strategy("multi_worker")
    chief = mgpu_tf.kind_of(strategy).is_chief
    x, y = problem.data()
    batches = global_batches(x, y, problem.GLOBAL_BATCH)
    for name in ("frozen", "synchronized"):
        with strategy.scope():
            model = problem.build(frozen_first=name == "frozen")
            if name == "synchronized":
                batch_norm.synchronize(model)
        model.fit(batches, epochs=problem.EPOCHS, shuffle=False, verbose=0)
        if name == "frozen":
            bn = model.get_layer("bn")
            values = np.concatenate([bn.moving_mean.numpy(), bn.moving_variance.numpy()])
            print("statistics:", " ".join(f"{v:.9e}" for v in values))
            print(f"evaluate: {model.evaluate(batches, verbose=0):.9e}")
        if chief:
            np.savez(out_dir / f"{name}.npz", *model.get_weights())
    print("done")


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
