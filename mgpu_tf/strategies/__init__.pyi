# For type checkers and IDEs; at run time lazy-loader loads each import below on first use.
# Type checkers take a stub's imports as exported only where `__all__` names them.

__all__ = ["auto_choice", "available_strategies", "make_strategy", "prepare_model",
           "strategy_kind"]

from .factory import auto_choice, available_strategies, make_strategy, prepare_model, strategy_kind
