# For type checkers and IDEs; at run time lazy-loader loads each import below on first use.
# Type checkers take a stub's imports as exported only where `__all__` names them.

__all__ = ["HybridParallel", "HybridStrategy"]

from . import model, strategy
from .model import HybridParallel
from .strategy import HybridStrategy
