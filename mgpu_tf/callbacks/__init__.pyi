# For type checkers and IDEs; at run time lazy-loader loads each import below on first use.
# Type checkers take a stub's imports as exported only where `__all__` names them.

__all__ = ["BackupAndRestore", "DataOrder", "ModelCheckpoint", "TensorBoard", "TrainingMonitor",
           "chief_path", "is_chief", "save_model", "save_weights", "strategy_of"]

from .backup import BackupAndRestore
from .chief import (ModelCheckpoint, TensorBoard, chief_path, is_chief, save_model, save_weights,
                    strategy_of)
from .data_order import DataOrder
from .monitor import TrainingMonitor
