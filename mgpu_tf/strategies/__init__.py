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
    "mgpu_tf.strategies.registry": "OPTIONS StrategyKind register_option register_strategy",
    "mgpu_tf.strategies.options": "validate_options",
    "mgpu_tf.strategies.factory": "auto_choice available_strategies make_strategy prepare_model "
                                  "strategy_kind",
    "mgpu_tf.strategies.devices": "simulate_devices",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
