# For type checkers and IDEs; at run time lazy-loader loads each import below on first use.
# Type checkers take a stub's imports as exported only where `__all__` names them.

__all__ = ["OPTIONS", "Option", "Settings", "StrategyKind", "StrategyName", "kind_of",
           "parse_options", "register_option", "register_strategy", "simulate_devices",
           "validate_options"]

from .devices import simulate_devices
from .options import OPTIONS, parse_options, validate_options
from .kind import StrategyKind, kind_of
from .registry import Option, StrategyName, register_option, register_strategy
from .settings import Settings
