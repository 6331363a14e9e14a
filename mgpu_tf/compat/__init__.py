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

import importlib.util

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
# Its modules are attributes too, but out of `__all__`: `import *` would load every one.
__all__ = [name for name in __all__ if importlib.util.find_spec(f"{__name__}.{name}") is None]
