"""Strategies: one name in, the real `tf.distribute` object out.

`builtin` builds TensorFlow's own strategies, `kinds` registers them with the objects that
answer for them, `factory` is `make_strategy` (which also loads the model-parallel plugins).
They stand on `mgpu_tf.base` (the names, the option checks, devices, precision), which
plugins register through; `options` here gathers every feature's declared options,
`registry` and `devices` are base's modules under their public paths
(`devices.simulate_devices` sets the log up first).
"""

import importlib.util

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
# Its modules are attributes too, but out of `__all__`: `import *` would load every one.
__all__ = [name for name in __all__ if importlib.util.find_spec(f"{__name__}.{name}") is None]
