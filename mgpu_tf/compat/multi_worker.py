"""Workarounds for upstream bugs, each guarded by the versions it is for.

Keras 3's `fit`, `evaluate` and `predict` under MultiWorkerMirroredStrategy
(keras-team/keras#20585), and with replicas whose batches differ in size
(keras-team/keras#19246).

Design: docs/design.md#multi-worker-workarounds
"""

import functools
import logging

from mgpu_tf.base import kind as kind_lib
from mgpu_tf.compat import private_trainer, versions

__all__ = [
    "KERAS_20585_VERSIONS",
    "apply_multi_worker_fixes",
    "fixes_installed",
    "float_positions",
    "log_mean_function",
    "multi_worker_fixes_apply",
    "pack_logs",
    "set_log_mean",
    "unpack_logs",
]

logger = logging.getLogger("mgpu_tf")

# First and last Keras (major, minor) releases with keras-team/keras#20585.
KERAS_20585_VERSIONS = ((3, 8), (3, 16))

_MARK = "_mgpu_tf_keras_20585"
_BUILD = "TensorFlowTrainer._maybe_symbolic_build"
_REDUCE = "reduce_per_replica"
_reported = set()


def multi_worker_fixes_apply(keras_version):
    """Returns True when a Keras version is one the multi-worker fixes are for.

    Args:
        keras_version: a version string such as `"3.15.1"`.

    Raises:
        TypeError: when `keras_version` is not a string.
        ValueError: when it does not start with `major.minor`.
    """
    return versions.release_in(keras_version, *KERAS_20585_VERSIONS, argument="keras_version")


def apply_multi_worker_fixes(*, keras_version=None):
    """Makes Keras `fit`, `evaluate` and `predict` work under MultiWorkerMirroredStrategy,
    and with replicas whose batches differ in size (keras-team/keras#19246).

    `make_strategy("multi_worker")` calls it; calling it again changes nothing.
    Outside `KERAS_20585_VERSIONS` it logs why it is skipping and does nothing.

    Example:

    ```python
    import tensorflow as tf
    from mgpu_tf import compat
    compat.apply_multi_worker_fixes()  # what make_strategy("multi_worker") does
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    ```

    Args:
        keras_version: the Keras version to decide for. Defaults to the
            installed `keras.__version__`.

    Returns:
        True when the fixes are in place, False when it skipped.

    Raises:
        TypeError, ValueError: for a `keras_version` that is not a version string.
    """
    import keras

    keras_version = keras.__version__ if keras_version is None else keras_version
    reason = versions.keras_mismatch(keras_version, *KERAS_20585_VERSIONS)
    if reason:
        _skip(reason)
        return False

    try:
        build = private_trainer.trainer_function(_BUILD)
        reduce = private_trainer.trainer_function(_REDUCE)
        private_trainer.trainer_function("_collective_all_reduce_multi_worker")
    except private_trainer.PrivateNameError as error:
        _skip(str(error))
        return False
    if getattr(reduce, _MARK, False):
        return True
    private_trainer.set_trainer_function(_BUILD, _build_from_first_replica(build))
    private_trainer.set_trainer_function(_REDUCE, _mean_over_replicas(reduce))
    logger.debug(  # `mgpu-tf env` and `patches.installed()` list it
        "mgpu_tf: patched Keras %s (keras-team/keras#20585) for multi-worker training: "
        "TensorFlowTrainer._maybe_symbolic_build and reduce_per_replica in %s.",
        keras_version, private_trainer.keras_trainer().__name__)
    return True


def fixes_installed():
    """True when Keras' trainer runs the multi-worker fixes."""
    return private_trainer.patched_by(_REDUCE, _MARK)


def _skip(reason):
    versions.log_once(f"not patching Keras for keras-team/keras#20585: {reason}.")


def _strategy_of(model):
    """The model's own strategy (None for none), or None with a log when Keras hides it."""
    try:
        return private_trainer.model_strategy(model)
    except private_trainer.PrivateNameError as error:
        _skip(f"{error} Keras' own build runs")
        return None


def _build_from_first_replica(original):
    """Wraps `_maybe_symbolic_build` to build from one replica's part of a distributed batch."""
    import tensorflow as tf

    @functools.wraps(original)
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = _strategy_of(self)
        if iterator is not None and data_batch is None and strategy is not None:
            # Keras 3.8-3.10 yield (step, batches), 3.11 on (first step, last step, batches).
            for *_, batches in iterator:
                data_batch = tf.nest.map_structure(
                    lambda v: (strategy.experimental_local_results(v)[0]
                               if isinstance(v, tf.distribute.DistributedValues) else v),
                    next(batches))
                break
            iterator = None
        return original(self, iterator=iterator, data_batch=data_batch)

    setattr(_maybe_symbolic_build, _MARK, True)
    return _maybe_symbolic_build


def _mean_over_replicas(original):
    """Wraps `reduce_per_replica` to average logs over all workers' replicas."""

    @functools.wraps(original)
    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and private_trainer.is_multi_worker(strategy):
            return _mean_logs(values, strategy)
        return original(values, strategy, reduction)

    setattr(reduce_per_replica, _MARK, True)
    return reduce_per_replica


def set_log_mean(strategy, mean):
    """Makes `strategy`'s workers average their step logs with `mean` instead of a collective.

    `mean(vector)` receives this worker's float32 vector of packed logs (one
    replica per worker) and returns the mean over workers. `mgpu_tf.comm.transport`
    sets it so that logs travel over the same ring as the gradients.
    """
    kind_lib.kind_of(strategy).log_mean = mean


def log_mean_function(strategy):
    """Returns the `mean` that `set_log_mean` gave `strategy`, or None when it has none."""
    return kind_lib.kind_of(strategy).log_mean


def float_positions(logs):
    """The positions in the flat list `logs` of the floating-point logs of known size."""
    return [i for i, v in enumerate(logs)
            if v.dtype.is_floating and v.shape.num_elements() is not None]


def pack_logs(logs, strategy):
    """The tensors `logs` as one float32 vector, for one all-reduce, with `strategy`'s stop
    vote last (`mgpu_tf.cluster.stop_vote`)."""
    import tensorflow as tf

    packed = tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1]) for v in logs], 0)
    vote = kind_lib.kind_of(strategy).stop_vote
    return packed if vote is None else vote.carry(packed)


def unpack_logs(vector, like, strategy):
    """`pack_logs`' vector, averaged, cut back into tensors shaped as `like`."""
    import tensorflow as tf

    vote = kind_lib.kind_of(strategy).stop_vote
    if vote is not None:
        vector = vote.keep(vector)
    pieces = tf.split(vector, [v.shape.num_elements() for v in like])
    return [tf.cast(tf.reshape(piece, v.shape), v.dtype) for piece, v in zip(pieces, like)]


def _mean_logs(values, strategy):
    """Averages the step's floating-point logs over replicas in one all-reduce."""
    import tensorflow as tf

    flat = tf.nest.flatten(values)
    local = [strategy.experimental_local_results(v)[0] for v in flat]
    floats = float_positions(local)
    out = list(flat)
    if floats:
        packed = strategy.run(lambda *logs: pack_logs(logs, strategy),
                              args=tuple(flat[i] for i in floats))
        ring_mean = log_mean_function(strategy)
        if ring_mean is not None:
            mean = ring_mean(strategy.experimental_local_results(packed)[0])
        else:
            mean = strategy.reduce("MEAN", packed, axis=None)
        for i, piece in zip(floats, unpack_logs(mean, [local[i] for i in floats], strategy)):
            out[i] = piece
    for i, v in enumerate(flat):
        if i not in floats:
            out[i] = strategy.reduce("MEAN", v, axis=None)
    return tf.nest.pack_sequence_as(values, out)
