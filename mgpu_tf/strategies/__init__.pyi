# For type checkers and IDEs; at run time lazy-loader loads each import below on first use.
# Type checkers take a stub's imports as exported only where `__all__` names them.

__all__ = ["OPTIONS", "StrategyName", "auto_choice", "available_strategies", "make_strategy",
           "prepare_model", "register_option", "register_strategy", "simulate_devices",
           "strategy_kind", "validate_options"]

# The modules load on first use too: the factory imports `builtin` only for a known name.
from . import builtin, devices, factory, kinds, options, registry
from .devices import simulate_devices
from .factory import auto_choice, available_strategies, make_strategy, prepare_model, strategy_kind
from .options import validate_options
from .registry import OPTIONS, StrategyName, register_option, register_strategy
