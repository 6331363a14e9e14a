"""Script: Keras' speed switches (`steps_per_execution`, `jit_compile`) under each strategy.

Usage:
    python -m support.steps_job one_machine OUT_DIR PART        (PART: a or b)
    python -m support.steps_job workers OUT_DIR OPTIONS_JSON   (under mgpu-tf launch)
    python -m support.steps_job hybrid OUT_DIR                 (under mgpu-tf launch)

Every run trains the same small classifier for two epochs on the same 200 examples in
global batches of 32 (7 steps an epoch, the last of 8 examples, so an execution of 3
steps ends short), once for each switch setting in `SETTINGS` (or, on one machine, in
its part of `ONE_MACHINE_PARTS`), and saves the weights,
the per-epoch losses, the evaluation and the predictions to OUT_DIR/<name>.npz.

`one_machine` runs default (the single-device reference), one_device, mirrored (2
devices, even and weighted shards) and model_parallel (2 stages), in the two parts of
`ONE_MACHINE_PARTS`; part `a` first checks Keras without the toolkit's fix (a
hand-built MirroredStrategy still fails with either switch: OUT_DIR/unpatched.json).
`workers` runs multi_worker with the make_strategy options given, counts the
all-reduces of the logs and checkpoints through the chief-only ModelCheckpoint;
`hybrid` runs a 2-stage pipeline on each worker.
"""

import json
import os
import pathlib
import sys

import numpy as np

SETTINGS = [(1, False), (3, False), (1, True), (3, True)]
EPOCHS = 2
GLOBAL_BATCH = 32
STEPS_PER_EPOCH = 7  # 200 examples
# The sums behind one gradient of build_model(), batch rows aside (support.tolerance).
TERMS = 8 + 16 + 16 + 3 + 16 + 16


def setting_name(prefix, steps, jit):
    return f"{prefix}-spe{steps}-{'xla' if jit else 'plain'}"


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 8)).astype("float32")
    y = rng.integers(0, 3, size=200)
    return x, y


def build_model():
    import keras

    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"),
                             keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(3)])


def compile_model(model, steps, jit):
    import keras

    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], steps_per_execution=steps, jit_compile=jit)


def train(strategy, steps, jit, *, weights=None, callbacks=()):
    """Fits, evaluates and predicts under `strategy`; returns the arrays to save."""
    import tensorflow as tf

    import mgpu_tf

    x, y = data()
    with strategy.scope():
        model = mgpu_tf.prepare_model(build_model(), strategy)
        compile_model(model, steps, jit)
    source = tf.data.Dataset.from_tensor_slices((x, y))
    shards = mgpu_tf.shard_dataset(source, strategy, GLOBAL_BATCH, weights=weights)
    history = model.fit(shards, epochs=EPOCHS, verbose=0, callbacks=list(callbacks))
    evaluation = model.evaluate(mgpu_tf.shard_dataset(source, strategy, GLOBAL_BATCH),
                                verbose=0)
    arrays = {f"w{i}": w for i, w in enumerate(model.get_weights())}
    arrays["loss"] = np.array(history.history["loss"])
    arrays["evaluation"] = np.array(evaluation)
    arrays["predictions"] = model.predict(x, batch_size=GLOBAL_BATCH, verbose=0)
    return arrays


def _unpatched(out):
    """What Keras itself does with either switch under a hand-built MirroredStrategy."""
    import tensorflow as tf

    x, y = data()
    errors = {}
    for name, steps, jit in (("steps_per_execution", 3, False), ("jit_compile", 1, True)):
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            model = build_model()
            compile_model(model, steps, jit)
        try:
            model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, verbose=0)
            errors[name] = None
        except Exception as error:  # noqa: BLE001 - the message is what is recorded
            errors[name] = f"{type(error).__name__}: {error}"
    (out / "unpatched.json").write_text(json.dumps(errors))


# The one-machine runs, in two parts that run side by side. The default strategy is
# Keras' own code: its switches are run once, together, beside the reference. Weighted
# shards matter in short executions, so they run with 3 steps an execution only.
ONE_MACHINE_PARTS = {
    "a": [("default", {}, None, [(1, False), (3, True)]),
          ("one_device", {}, None, SETTINGS),
          ("mirrored", {}, [2, 1], [(3, False), (3, True)])],
    "b": [("mirrored", {}, None, SETTINGS),
          ("model_parallel", {"microbatches": 2}, None, SETTINGS)],
}


def one_machine(out, part):
    import mgpu_tf

    mgpu_tf.simulate_devices(2)
    if part == "a":
        _unpatched(out)
    for kind, options, weights, settings in ONE_MACHINE_PARTS[part]:
        strategy = mgpu_tf.make_strategy(kind, **options)
        prefix = kind + ("-weighted" if weights else "")
        for steps, jit in settings:
            np.savez(out / f"{setting_name(prefix, steps, jit)}.npz",
                     **train(strategy, steps, jit, weights=weights))


def workers(out, options):
    import tensorflow as tf

    import mgpu_tf
    from mgpu_tf import callbacks, compat

    strategy = mgpu_tf.make_strategy("multi_worker", **options)
    index = strategy.cluster_resolver.task_id
    counted = options.get("transport") != "tcp"  # the tcp transport sets its own log mean
    for steps, jit in SETTINGS:
        name = setting_name("workers", steps, jit)
        count = tf.Variable(0, dtype=tf.int64, trainable=False)
        if counted:
            compat.set_log_mean(strategy, _counting_mean(strategy, count))
        checkpoint = callbacks.ModelCheckpoint(
            str(out / f"{name}-ckpt-{index}-{{epoch}}.weights.h5"), save_weights_only=True)
        arrays = train(strategy, steps, jit, callbacks=[checkpoint])
        arrays["log_means"] = np.array(count.numpy() if counted else -1)
        np.savez(out / f"{name}-{index}.npz", **arrays)


def _counting_mean(strategy, count):
    """A log mean over the workers (one all-reduce) that counts its calls in `count`."""
    import tensorflow as tf

    def mean(vector):
        count.assign_add(1)
        per_replica = strategy.run(
            lambda v: tf.distribute.get_replica_context().all_reduce("MEAN", tf.identity(v)),
            args=(vector,))
        return strategy.experimental_local_results(per_replica)[0]

    return mean


def hybrid(out):
    import mgpu_tf

    mgpu_tf.simulate_devices(2)
    strategy = mgpu_tf.make_strategy("hybrid", devices_per_worker=2, microbatches=2)
    index = strategy.task_index
    for steps, jit in SETTINGS:
        arrays = train(strategy, steps, jit)
        np.savez(out / f"{setting_name('hybrid', steps, jit)}-{index}.npz", **arrays)


def main(argv):
    mode, out = argv[1], pathlib.Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    if mode == "one_machine":
        one_machine(out, argv[3])
    elif mode == "workers":
        workers(out, json.loads(argv[3]))
    elif mode == "hybrid":
        hybrid(out)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(f"done: {mode} pid={os.getpid()}", flush=True)


if __name__ == "__main__":
    main(sys.argv)
