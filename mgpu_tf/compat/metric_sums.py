"""Keras 3.8-3.9's metrics under a strategy of several replicas: each step adds its part once.

Keras adds to a variable as `assign(variable + delta)`. There a metric's variables are
synchronized on write and sum the replicas' writes, so each step also added the old total
once per replica: `evaluate` and the logs of `fit` weighed late steps up. Keras 3.10 keeps
metric variables per replica (synchronized on read). On 3.8-3.9 the fix adds the delta itself
in a replica's step, and the strategy sums the replicas' deltas.

Design: docs/design.md#keras-metrics-under-a-strategy
"""

import functools

from mgpu_tf.compat import private, versions

__all__ = ["KERAS_METRIC_SUM_VERSIONS", "apply_metric_sum_fix", "installed",
           "metric_sum_fix_applies"]

# First and last Keras (major, minor) releases whose metric variables sum on write.
KERAS_METRIC_SUM_VERSIONS = ((3, 8), (3, 9))

_MARK = "_mgpu_tf_metric_sums"


def metric_sum_fix_applies(keras_version):
    """Returns True when `keras_version` (such as `"3.9.2"`) is one the fix is for."""
    return versions.release_in(keras_version, *KERAS_METRIC_SUM_VERSIONS,
                               argument="keras_version")


def installed():
    """True when Keras variables add in a replica's step through the fix."""
    try:
        return getattr(private.variable_method("assign_add"), _MARK, False)
    except private.PrivateNameError:
        return False


def apply_metric_sum_fix(*, keras_version=None):
    """Makes Keras' metrics count each step once under a strategy of several replicas.

    `make_strategy` calls it; calling it again changes nothing. Outside
    `KERAS_METRIC_SUM_VERSIONS` (for `keras_version`, defaulting to `keras.__version__`) it
    skips; with another Keras backend it logs why. Returns True when the fix is in place,
    False when it skipped.
    """
    import keras

    keras_version = keras.__version__ if keras_version is None else keras_version
    if not metric_sum_fix_applies(keras_version):
        return False  # other releases keep metric variables per replica: nothing to fix
    reason = versions.keras_mismatch(keras_version, *KERAS_METRIC_SUM_VERSIONS)
    if reason:
        versions.log_once(f"not patching Keras' metric sums under tf.distribute: {reason}.")
        return False
    if installed():
        return True
    for name, sign in (("assign_add", 1), ("assign_sub", -1)):
        private.set_variable_method(name, _adding_once(private.variable_method(name), sign))
    return True


def _adding_once(original, sign):
    """Wraps `Variable.assign_add` (`sign` 1) or `assign_sub` (-1) to add a replica's delta."""
    import tensorflow as tf

    @functools.wraps(original)
    def assign(self, value):
        storage = private.variable_storage(self)
        if not (_sums_on_write(storage) and tf.distribute.has_strategy()
                and not tf.distribute.in_cross_replica_context()):
            return original(self, value)
        delta = tf.cast(value, storage.dtype)
        return storage.assign_add(delta) if sign > 0 else storage.assign_sub(delta)

    setattr(assign, _MARK, True)
    return assign


def _sums_on_write(storage):
    import tensorflow as tf

    return (isinstance(storage, tf.distribute.DistributedValues)
            and storage.aggregation == tf.VariableAggregation.SUM
            and storage.synchronization != tf.VariableSynchronization.ON_READ)
