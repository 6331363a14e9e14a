"""Worker script: `fit` under multi_worker with shard_optimizer_state, several runs checked.

Usage: `python -m support.mw_sharded OUT_DIR [TRANSPORT]`. Each worker trains
`support.sharded_problem`'s model with SGD with momentum, Adam and AdamW and writes, to
OUT_DIR/worker<index>.npz, the final weights of each and the shapes of its slot parts;
Adam's weights file (with its optimizer state) goes to OUT_DIR/adam.weights.h5. Then each
of `VARIANTS` (other options with Adam) is trained sharded and unsharded, the collective
ops of Keras' train step are counted, and what an all-to-all of known rows delivers is
kept. With TRANSPORT `tcp`, only the three optimizers run, and the op counts of Adam's step.
"""

import collections
import pathlib
import sys

import numpy as np

from support import sharded_problem

# Name -> (options `prepare.install` takes besides sharding, compile options, precision).
VARIANTS = {
    "switches": ({"steps_per_sync": 2}, {"jit_compile": True, "steps_per_execution": 2}, None),
    "mixed": ({"steps_per_sync": 2}, {}, "mixed_float16"),
    "compressed": ({"compression": "float16"}, {}, None),
}


def collective_ops(strategy, model):
    """`{op type: count}` of the Collective* ops (and PyFunc, the tcp ring's) of one traced
    train step, nested ones too."""
    import tensorflow as tf

    x, y = sharded_problem.data()
    data = next(iter(strategy.experimental_distribute_dataset(sharded_problem.batches(x, y))))
    step = tf.function(lambda d: strategy.run(model.train_step, args=(d,)), autograph=False)
    graph = step.get_concrete_function(data).graph.as_graph_def()
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return collections.Counter(n.op for n in nodes
                               if n.op.startswith("Collective") or n.op == "PyFunc")


def exchanged(strategy):
    """What each local replica receives when replica `r` sends row `[10 r + j]` to replica `j`."""
    import tensorflow as tf

    from mgpu_tf.compat import private_collectives

    count = strategy.num_replicas_in_sync

    def send():
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        return tf.reshape(tf.range(count, dtype=tf.float32) + 10.0 * tf.cast(replica, tf.float32),
                          [count, 1])

    @tf.function(autograph=False)
    def run():
        rows = strategy.run(send)
        launchers = private_collectives.collective_launchers(strategy)
        return [private_collectives.all_to_all(launcher, value)
                for launcher, value in zip(launchers, strategy.experimental_local_results(rows))]

    return np.stack([np.asarray(v) for v in run()])


def train_variant(strategy, name, sharded):
    """Adam under `VARIANTS[name]`, its options installed before compile takes the strategy's."""
    import keras

    from mgpu_tf.base import precision as precision_lib
    from mgpu_tf.comm import prepare

    options, compile_options, precision = VARIANTS[name]
    x, y = sharded_problem.data()
    try:
        if precision:
            precision_lib.set_precision(precision)
        with strategy.scope():
            model = sharded_problem.build_model("adam")
            optimizer = sharded_problem.make_optimizer("adam")
            prepare.install(optimizer, strategy, shard_optimizer_state=sharded, **options)
            model.compile(optimizer, "mse", **compile_options)
        model.fit(sharded_problem.batches(x, y), epochs=1, shuffle=False, verbose=0)
        counts = collective_ops(strategy, model) if name != "mixed" else {}
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    return model, counts


def main(out_dir, transport="tensorflow"):
    import mgpu_tf
    from mgpu_tf.cluster import detect as cluster
    from mgpu_tf.comm import sharded_state

    out_dir = pathlib.Path(out_dir)
    strategy = mgpu_tf.make_strategy("multi_worker", shard_optimizer_state=True,
                                     transport=transport)
    index = cluster.detect_cluster().task_index
    tcp = transport == "tcp"
    saved = {} if tcp else {"exchanged": exchanged(strategy)}
    for name in ("sgd", "adam", "adamw"):
        model = sharded_problem.train(strategy, name)
        for i, weight in enumerate(model.get_weights()):
            saved[f"{name}_{i}"] = weight
        parts = [part for slot in sharded_state.slot_variables(model.optimizer)
                 for part in strategy.experimental_local_results(slot.value)]
        saved[f"{name}_slot_sizes"] = [int(np.prod(p.shape)) for p in parts]
        if name == "adam":  # every worker saves: the slots are gathered from all of them
            if not tcp:
                mgpu_tf.callbacks.save_weights(model, out_dir / "adam.weights.h5")
            for op, count in collective_ops(strategy, model).items():
                saved[f"ops_adam_sharded_{op}"] = count
    for name in () if tcp else VARIANTS:
        for sharded in (True, False):
            kind = "sharded" if sharded else "whole"
            model, counts = train_variant(strategy, name, sharded)
            for i, weight in enumerate(model.get_weights()):
                saved[f"{name}_{kind}_{i}"] = weight
            for op, count in counts.items():
                saved[f"ops_{name}_{kind}_{op}"] = count
    np.savez(out_dir / f"worker{index}.npz", **saved)
    print(f"worker {index} of {strategy.num_replicas_in_sync} replicas: done")


if __name__ == "__main__":
    main(*sys.argv[1:])
