"""Strategies: one name in, the real `tf.distribute` object out.

`registry` holds the strategy and option names (no TensorFlow), `options` checks
options before TensorFlow's runtime starts, `builtin` builds TensorFlow's own
strategies, `factory` is `make_strategy` (which also loads the model-parallel
plugins), `devices` lists and simulates devices, `precision` the dtype policy.
Lower layers (`registry`, `options`, `devices`) never import `factory`; plugins
register through `registry`.
"""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
