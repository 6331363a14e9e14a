# For type checkers and IDEs; at run time lazy-loader loads each import below on first use.
# Type checkers take a stub's imports as exported only where `__all__` names them.

__all__ = ["FreshProcessError", "MODELS", "ModelSpec", "Setting", "default_settings",
           "format_table", "run_in_fresh_process", "summarise", "switched", "write_json",
           "write_plot"]

from .report import format_table, summarise, write_json, write_plot
from .runner import FreshProcessError, run_in_fresh_process
from .settings import MODELS, ModelSpec, Setting, default_settings, switched
