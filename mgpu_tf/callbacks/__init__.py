"""Keras callbacks for training on several devices and workers.

`chief` writes checkpoints, models and logs from the chief only, atomically
(`ModelCheckpoint`, `TensorBoard`, `save_model`, `chief_path`, ...);
`data_order` keeps each epoch's data order a function of the seed and the epoch
(`DataOrder`); `backup` backs up everything that shapes the next update and
resumes from it, at an epoch or mid-epoch (`BackupAndRestore`); `monitor` shows
each worker's step, compute and wait times, speed and memory, and moves adaptive
shards (`TrainingMonitor`), with `measure` doing the measuring.
"""

from mgpu_tf import lazy_exports

_EXPORTS = {
    "mgpu_tf.callbacks.chief": "is_chief chief_path strategy_of save_model save_weights "
                               "ModelCheckpoint TensorBoard",
    "mgpu_tf.callbacks.data_order": "DataOrder",
    "mgpu_tf.callbacks.backup": "BackupAndRestore",
    "mgpu_tf.callbacks.monitor": "TrainingMonitor",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
