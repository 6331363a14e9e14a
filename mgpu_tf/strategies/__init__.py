"""Strategies: one name in, the real `tf.distribute` object out.

`registry` holds the strategy and option names (no TensorFlow), `options` checks
options before TensorFlow's runtime starts, `builtin` builds TensorFlow's own
strategies, `factory` is `make_strategy` (which also loads the model-parallel
plugins), `devices` lists and simulates devices, `precision` the dtype policy.
Lower layers (`registry`, `options`, `devices`) never import `factory`; plugins
register through `registry`.
"""

from mgpu_tf import lazy_exports

_EXPORTS = {
    "OPTIONS": "mgpu_tf.strategies.registry",
    "StrategyKind": "mgpu_tf.strategies.registry",
    "register_option": "mgpu_tf.strategies.registry",
    "register_strategy": "mgpu_tf.strategies.registry",
    "validate_options": "mgpu_tf.strategies.options",
    "auto_choice": "mgpu_tf.strategies.factory",
    "available_strategies": "mgpu_tf.strategies.factory",
    "make_strategy": "mgpu_tf.strategies.factory",
    "prepare_model": "mgpu_tf.strategies.factory",
    "strategy_kind": "mgpu_tf.strategies.factory",
    "simulate_devices": "mgpu_tf.strategies.devices",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
