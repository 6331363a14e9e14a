# For type checkers and IDEs; at run time lazy-loader loads each import below on first use.
# Type checkers take a stub's imports as exported only where `__all__` names them.

__all__ = ["Footprint", "Option", "Plan", "PlanError", "format_size", "parse_size", "plan"]

from .memory import Footprint, format_size, parse_size
from .recommend import Option, Plan, PlanError, plan
