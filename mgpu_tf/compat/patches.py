"""The patches mgpu_tf makes to Keras: installed here, each once, and listed by `mgpu-tf env`.

Design: docs/design.md#state-on-objects
"""

from mgpu_tf.compat import (compile_hook, custom_loop, fit_hook, keras_hub, keras_steps,
                            lazy_build, metric_reads, metric_sums, multi_worker,
                            optimizer_hooks, replica_seeds, shuffle_hook, step_loss)

__all__ = ["PATCHES", "REPLICA_FIXES", "install", "installed"]

# (name, what it does, install, whether it is in place). Each install is idempotent.
PATCHES = (
    ("multi_worker",
        "fit/evaluate/predict under MultiWorkerMirroredStrategy and with replicas' batches "
        "of different sizes (keras-team/keras#20585, #19246)",
        multi_worker.apply_multi_worker_fixes, multi_worker.fixes_installed),
    ("steps",
        "steps_per_execution and jit_compile under tf.distribute strategies",
        keras_steps.apply_step_fixes, keras_steps.step_fixes_installed),
    ("optimizer",
        "optimizer build, apply, all-reduce and clipping follow the optimizer's record "
        "(gradient accumulation, compression, transport='tcp', clipping of the summed "
        "gradient)",
        optimizer_hooks.install, optimizer_hooks.installed),
    ("metric_sums",
        "Keras 3.8-3.9's metrics count each step once under a strategy of several replicas",
        metric_sums.apply_metric_sum_fix, metric_sums.installed),
    ("metric_reads",
        "metric reads and resets between steps under several workers run as one traced "
        "function each, whose collectives keep their keys (TensorFlow keeps a record of each "
        "eager collective's key)",
        metric_reads.install, metric_reads.installed),
    ("compile",
        "compile readies the optimizer of a model made under a strategy with communication "
        "options (compression, gradient accumulation, transport)",
        compile_hook.install, compile_hook.installed),
    ("shuffle",
        "fit's shuffle does not apply to data sets from shard_dataset, which order their own "
        "examples (shuffle_seed): Keras does not warn that it cannot shuffle them",
        shuffle_hook.install, shuffle_hook.installed),
    ("fit",
        "fit refuses a data set from shard_dataset(weights='adaptive') that nothing steers, and "
        "releases the pipelines waiting for its shares however it ends",
        fit_hook.install, fit_hook.installed),
    ("custom_loop",
        "optimizers make their variables outside the traced step of a custom training loop "
        "(keras-team/keras#23085)",
        custom_loop.apply_custom_loop_fix, custom_loop.installed),
    ("lazy_build",
        "a model built at its first call inside strategy.run (a Sequential without an Input) "
        "is built in the strategy's cross-replica scope, not in one replica's trace",
        lazy_build.apply_lazy_build_fix, lazy_build.installed),
    ("step_loss",
        "a model's own train_step or test_step logs the loss compute_loss or a keras.losses "
        "loss gave it as on one device, returned or through a Mean or Sum tracker, not "
        "divided by the replicas",
        step_loss.install, step_loss.installed),
    ("replica_seeds",
        "each replica draws its own random numbers (Dropout masks): Keras' seeds are folded "
        "with the replica's id, where every replica drew the same",
        replica_seeds.apply_replica_seed_fix, replica_seeds.installed),
    ("keras_hub",
        "KerasHub's task models take data sets of shard_dataset, their preprocessing in each "
        "replica's input pipeline (once KerasHub is imported)",
        keras_hub.install, keras_hub.installed),
)

# The upstream fixes a strategy of several replicas needs, on one machine too.
REPLICA_FIXES = ("multi_worker", "steps", "custom_loop", "lazy_build", "metric_sums",
                 "metric_reads", "step_loss", "replica_seeds", "keras_hub")


def install(*names):
    """Installs the patches `names` (all when none) that apply to this Keras; returns `installed()`.

    Calling it again changes nothing; a patch that does not apply logs why.
    """
    known = {name: install for name, _, install, _ in PATCHES}
    for name in names or known:
        if name not in known:
            raise ValueError(f"`names` must be among {', '.join(known)}. "
                             f"Received: {name!r}")
        known[name]()
    return installed()


def installed():
    """`{name: what it does}` of the patches in place now."""
    return {name: what for name, what, _, present in PATCHES if present()}
