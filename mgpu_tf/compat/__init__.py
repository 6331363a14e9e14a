"""Fixes for upstream Keras and TensorFlow bugs, and the private names mgpu_tf touches.

`multi_worker` (keras-team/keras#20585, #19246), `collective_keys`, `keras_steps`,
`keras_train_step`, `native_logs`, `custom_loop` (keras-team/keras#23085), installed by
`patches`; `private`, `private_trainer`, `private_callbacks`, `private_collectives` and
`versions` hold every private name touched.

Design: docs/design.md#multi-worker-workarounds
"""

import importlib.util

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
# Its modules are attributes too, but out of `__all__`: `import *` would load every one.
__all__ = [name for name in __all__ if importlib.util.find_spec(f"{__name__}.{name}") is None]
