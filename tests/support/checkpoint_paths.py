"""Saving training through each checkpoint path, and resuming it in a fresh process.

The training: a small model, sharded Adam under mirrored x2, three batches a pass, two
passes; saved after the first pass (with `steps_per_sync=2`, one step into a window).
`python checkpoint_paths.py SAVED OUT` restores in a process of its own what `save`
wrote in SAVED through each path, finishes the training and writes the weights to OUT.
"""

import os
import sys

import numpy as np

__all__ = ["BATCH", "PATHS", "WEIGHTS_ONLY", "build", "data", "save", "strategy_for",
           "train"]

BATCH = 8
STEPS = 3  # a pass; the training is two
# Path -> the option sets (steps_per_sync) it resumes.
PATHS = {"tf.train.Checkpoint": (1, 2), "tf.train.CheckpointManager": (1,),
         "model.save": (1,), "model.save_weights": (1,),
         "keras.callbacks.BackupAndRestore": (1,), "mgpu_tf.callbacks.BackupAndRestore": (1,)}
# A restore with the sharded slots zeroed: what a checkpoint without them resumes to.
WEIGHTS_ONLY = "zeroed slots"


def data():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(STEPS * BATCH, 3)).astype("float32")
    return x, np.tanh(x @ rng.normal(size=(3, 2))).astype("float32")


def build(strategy):
    import keras

    keras.utils.set_random_seed(3)
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                                  keras.layers.Dense(2)])
        model.compile(keras.optimizers.Adam(0.05), "mse")
    return model


def strategy_for(steps_per_sync):
    import mgpu_tf

    return mgpu_tf.make_strategy("mirrored", devices=2, shard_optimizer_state=True,
                                 steps_per_sync=steps_per_sync)


def train(model, epochs, callbacks=()):
    x, y = data()
    model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0,
              callbacks=list(callbacks))
    return model


def _callbacks(saved):
    import keras
    import mgpu_tf

    return [keras.callbacks.BackupAndRestore(os.path.join(saved, "keras_backup"),
                                             delete_checkpoint=False),
            mgpu_tf.callbacks.BackupAndRestore(os.path.join(saved, "mgpu_backup"),
                                               delete_checkpoint=False)]


def save(saved, steps_per_sync):
    """Trains one pass, saves it through every path that holds `steps_per_sync`'s state,
    then trains the second pass without a restore.

    Returns:
        The uninterrupted run's weights.
    """
    import tensorflow as tf

    model = build(strategy_for(steps_per_sync))
    here = os.path.join(saved, str(steps_per_sync))
    if steps_per_sync == 1:
        train(model, 1, _callbacks(here))
        model.save(os.path.join(here, "model.keras"))
        model.save_weights(os.path.join(here, "model.weights.h5"))
    else:
        train(model, 1)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    checkpoint.save(os.path.join(here, "checkpoint", "ckpt"))
    tf.train.CheckpointManager(checkpoint, os.path.join(here, "manager"), 2).save()
    return train(model, 1).get_weights()


def _resume(model, path, here):
    """`model`, restored through `path` from `here`, after the second pass.

    Each restore sets the whole state, so one model (one traced step) takes them in turn.
    """
    import tensorflow as tf

    if path.endswith("BackupAndRestore"):
        callback = _callbacks(here)[path.startswith("mgpu_tf")]
        return train(model, 2, [callback])
    if path == "model.save_weights":
        model.load_weights(os.path.join(here, "model.weights.h5"))
        return train(model, 1)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    if path.endswith("Manager"):
        folder = tf.train.CheckpointManager(checkpoint, os.path.join(here, "manager"), 2
                                            ).latest_checkpoint
    else:
        folder = tf.train.latest_checkpoint(os.path.join(here, "checkpoint"))
    checkpoint.restore(folder).assert_existing_objects_matched()
    if path == WEIGHTS_ONLY:
        from mgpu_tf.comm import sharded_state

        for slot in sharded_state.slot_variables(model.optimizer):
            for part in model.distribute_strategy.experimental_local_results(slot.value):
                part.assign(tf.zeros_like(part))
    return train(model, 1)


def main(saved, out):
    import keras
    import mgpu_tf

    mgpu_tf.simulate_devices(2)
    results = {}
    for steps_per_sync in (1, 2):
        strategy = strategy_for(steps_per_sync)
        here = os.path.join(saved, str(steps_per_sync))
        model = build(strategy)
        model.optimizer.build(model.trainable_variables)
        paths = [path for path, options in PATHS.items() if steps_per_sync in options]
        for path in paths + [WEIGHTS_ONLY] * (steps_per_sync == 1):
            if path == "model.save":
                with strategy.scope():
                    loaded = keras.models.load_model(os.path.join(here, "model.keras"))
                weights = train(loaded, 1).get_weights()
            else:
                weights = _resume(model, path, here).get_weights()
            results.update({f"{path}|{steps_per_sync}|{i}": w for i, w in enumerate(weights)})
    np.savez(out, **results)


if __name__ == "__main__":
    main(*sys.argv[1:])
