"""Worker script: `fit` under multi_worker with shard_optimizer_state, three optimizers.

Usage: `python -m support.mw_sharded OUT_DIR`. Each worker trains `support.sharded_problem`'s
model with SGD with momentum, Adam and AdamW and writes, to OUT_DIR/worker<index>.npz, the
final weights of each and the shapes of its slot parts; the chief also writes Adam's
weights file (with its optimizer state) to OUT_DIR/adam.weights.h5.
"""

import pathlib
import sys

import numpy as np

from support import sharded_problem


def main(out_dir):
    import mgpu_tf
    from mgpu_tf.cluster import detect as cluster
    from mgpu_tf.comm import sharded_state

    out_dir = pathlib.Path(out_dir)
    strategy = mgpu_tf.make_strategy("multi_worker", shard_optimizer_state=True)
    index = cluster.detect_cluster().task_index
    saved = {}
    for name in ("sgd", "adam", "adamw"):
        model = sharded_problem.train(strategy, name)
        for i, weight in enumerate(model.get_weights()):
            saved[f"{name}_{i}"] = weight
        parts = [part for slot in sharded_state.slot_variables(model.optimizer)
                 for part in strategy.experimental_local_results(slot.value)]
        saved[f"{name}_slot_sizes"] = [int(np.prod(p.shape)) for p in parts]
        if name == "adam":  # every worker saves: the slots are gathered from all of them
            mgpu_tf.callbacks.save_weights(model, out_dir / "adam.weights.h5")
    np.savez(out_dir / f"worker{index}.npz", **saved)
    print(f"worker {index} of {strategy.num_replicas_in_sync} replicas: done")


if __name__ == "__main__":
    main(*sys.argv[1:])
