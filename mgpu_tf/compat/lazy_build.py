"""A model built at its first call inside `strategy.run` (TensorFlow's custom-loop tutorial's
`Sequential` without an `Input`).

Keras makes a layer's variables at its first call; inside `strategy.run` in a `tf.function`
that is one replica's traced graph, where MirroredStrategy cannot initialise the other
replicas' copies ("You must feed a value for placeholder tensor ..."). This builds the layer
as `custom_loop` builds an optimizer: once, eagerly, in the cross-replica scope.

Design: docs/design.md#layers-built-inside-strategyrun
"""

import functools

from mgpu_tf.compat import private, versions

__all__ = ["KERAS_LAZY_BUILD_VERSIONS", "apply_lazy_build_fix", "installed",
           "lazy_build_fix_applies"]

# First and last Keras (major, minor) releases this is for: those of keras-team/keras#23085,
# whose optimizers fail the same way; 3.16 (keras-nightly for TensorFlow 2.22) still does.
KERAS_LAZY_BUILD_VERSIONS = ((3, 0), (3, 16))

_MARK = "_mgpu_tf_lazy_build"


def lazy_build_fix_applies(keras_version):
    """Returns True when `keras_version` (such as `"3.15.1"`) is one the fix is for."""
    return versions.release_in(keras_version, *KERAS_LAZY_BUILD_VERSIONS,
                               argument="keras_version")


def installed():
    """True when Keras' layers build outside the traced replica step."""
    try:
        return getattr(private.layer_build_method(), _MARK, False)
    except private.PrivateNameError:
        return False


def apply_lazy_build_fix(*, keras_version=None):
    """Makes a layer's first call inside `strategy.run` build it outside the trace.

    `make_strategy` calls it through `compat.patches`; again it changes nothing. Outside
    `KERAS_LAZY_BUILD_VERSIONS` (for `keras_version`, defaulting to `keras.__version__`) it
    logs why and skips. Returns True when the fix is in place, False when it skipped.
    """
    import keras

    keras_version = keras.__version__ if keras_version is None else keras_version
    reason = versions.keras_mismatch(keras_version, *KERAS_LAZY_BUILD_VERSIONS)
    if reason is None:
        try:
            original = private.layer_build_method()
        except private.PrivateNameError as error:
            reason = str(error)
    if reason is not None:
        versions.log_once(f"not patching Keras for layers built inside strategy.run: {reason}.")
        return False
    if not getattr(original, _MARK, False):
        private.set_layer_build_method(_built_outside(original))
    return True


def _built_outside(original):
    """Wraps `Layer._maybe_build` to build the layer eagerly when a replica traces its call."""
    import tensorflow as tf

    def build(strategy, layer, call_spec):
        # One build for all replicas, eagerly in the cross-replica scope: each variable is
        # initialised on every device, as when the model is built before `strategy.run`.
        with tf.init_scope(), strategy.scope():
            original(layer, call_spec)

    @functools.wraps(original)
    def _maybe_build(self, call_spec):
        if (not self.built and tf.inside_function() and tf.distribute.has_strategy()
                and not tf.distribute.in_cross_replica_context()):
            tf.distribute.get_replica_context().merge_call(
                lambda strategy: build(strategy, self, call_spec))
            return None
        return original(self, call_spec)

    setattr(_maybe_build, _MARK, True)
    return _maybe_build
