"""Fixes for upstream Keras and TensorFlow bugs, and the private names mgpu_tf touches.

Each fix and each private name is guarded by the releases it is known for:

- `multi_worker`: Keras' `fit`, `evaluate` and `predict` under
  MultiWorkerMirroredStrategy (keras-team/keras#20585), and with replicas whose
  batches differ in size (keras-team/keras#19246).
- `collective_keys`: a collective key range of its own for each MirroredStrategy.
- `keras_steps`: `steps_per_execution` and `jit_compile` under `tf.distribute`
  strategies (keras-team/keras#19005, tensorflow/tensorflow#53140).
- `keras_train_step`: Keras' train step, for the steps that cannot be Keras' own
  (XLA per replica under a strategy, `HybridParallel`'s average over workers).
- `native_logs`: TensorFlow's C++ start-up lines, which `TF_CPP_MIN_LOG_LEVEL` does
  not reach (abseil/abseil-cpp#1718), kept out of the main job's output.
- `private` (with `private_trainer`, for Keras' TensorFlow trainer, and
  `private_callbacks`, for the chief-only callbacks): an accessor for every private
  Keras or TensorFlow name the toolkit touches; `versions` says which releases each
  is known for.
"""

from mgpu_tf import lazy_exports

_EXPORTS = {
    "mgpu_tf.compat.multi_worker": ("KERAS_20585_VERSIONS apply_multi_worker_fixes "
                                    "multi_worker_fixes_apply set_log_mean"),
    "mgpu_tf.compat.collective_keys": "distinct_collective_keys",
    "mgpu_tf.compat.keras_steps": "KERAS_STEP_VERSIONS apply_step_fixes step_fixes_apply",
}

_SUBMODULES = ("multi_worker", "collective_keys", "keras_steps", "keras_train_step",
               "native_logs", "private", "private_callbacks", "private_trainer", "versions")

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _SUBMODULES)
