"""TensorFlow's distributed custom training loop with an optimizer nobody built beforehand.

Keras 3 builds an optimizer (Adam's moments, SGD's momentum) in its first `apply`; inside
`strategy.run` in a `tf.function`, the traced graph of one replica, MirroredStrategy cannot
initialise the variables (keras-team/keras#23085); Keras 3.16 makes them there under
`tf.init_scope`, where a checkpoint restored before the first step reaches one device's copy.
This builds it as `fit` does: once, eagerly, under the strategy's cross-replica scope.

Design: docs/design.md#optimizers-built-in-a-custom-loop
"""

import functools

from mgpu_tf.compat import private, versions

__all__ = ["KERAS_23085_VERSIONS", "apply_custom_loop_fix", "custom_loop_fix_applies",
           "installed"]

# First and last Keras (major, minor) releases with keras-team/keras#23085 (3.0-3.15) or a
# restore that reaches one device's copy of an optimizer built in the trace (3.16).
KERAS_23085_VERSIONS = ((3, 0), (3, 16))

_MARK = "_mgpu_tf_keras_23085"


def custom_loop_fix_applies(keras_version):
    """Returns True when `keras_version` (such as `"3.15.1"`) is one the fix is for.

    Raises `TypeError` for a version that is not a string, `ValueError` for one not
    starting with `major.minor`.
    """
    return versions.release_in(keras_version, *KERAS_23085_VERSIONS, argument="keras_version")


def installed():
    """True when Keras' optimizers run the fix in `apply`."""
    try:
        return getattr(private.optimizer_class_method("apply"), _MARK, False)
    except private.PrivateNameError:
        return False


def apply_custom_loop_fix(*, keras_version=None):
    """Makes an optimizer's first `apply` inside `strategy.run` build it outside the trace.

    `make_strategy("mirrored")` and `make_strategy("multi_worker")` call it; calling it
    again changes nothing. Outside `KERAS_23085_VERSIONS` or off the TensorFlow backend it
    logs why and does nothing.

    Example:

    ```python
    from mgpu_tf.compat import custom_loop
    custom_loop.apply_custom_loop_fix()  # what make_strategy("mirrored") does
    ```

    Args:
        keras_version: the Keras version to decide for. Defaults to the installed
            `keras.__version__`.

    Returns:
        True when the fix is in place, False when it skipped.

    Raises:
        TypeError, ValueError: for a `keras_version` that is not a version string.
    """
    import keras

    keras_version = keras.__version__ if keras_version is None else keras_version
    reason = versions.keras_mismatch(keras_version, *KERAS_23085_VERSIONS)
    if reason is None:
        try:
            original = private.optimizer_class_method("apply")
        except private.PrivateNameError as error:
            reason = str(error)
    if reason is not None:
        versions.log_once(f"not patching Keras for keras-team/keras#23085: {reason}.")
        return False
    if not getattr(original, _MARK, False):
        private.set_optimizer_class_method("apply", _built_first(original))
    return True


def _built_first(original):
    """Wraps `BaseOptimizer.apply` to build the optimizer first when a replica traces it."""
    import keras
    import tensorflow as tf

    def build(strategy, optimizer, variables):
        # One build for all replicas, in eager mode and the strategy's cross-replica scope:
        # each variable is initialised on every device, and a pending checkpoint restore
        # reaches every device's copy.
        with tf.init_scope(), strategy.scope(), keras.name_scope(optimizer.name,
                                                                  caller=optimizer):
            optimizer.build(variables)

    @functools.wraps(original)
    def apply(self, grads, trainable_variables=None):
        if (not self.built and trainable_variables is not None and tf.inside_function()
                and tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context()):
            trainable_variables = list(trainable_variables)
            tf.distribute.get_replica_context().merge_call(
                lambda strategy: build(strategy, self, trainable_variables))
        return original(self, grads, trainable_variables)

    setattr(apply, _MARK, True)
    return apply
