"""Strategies: one name in, the real `tf.distribute` object out.

`builtin` builds TensorFlow's own strategies, `factory` is `make_strategy` (which
also loads the model-parallel plugins). Both stand on `mgpu_tf.base` (the names,
the option checks, devices, precision), which plugins register through;
`registry`, `options` and `devices` here are its modules under their public paths.
"""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
