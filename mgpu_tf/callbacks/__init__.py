"""Keras callbacks for training on several devices and workers.

`chief` writes checkpoints, models and logs from the chief only, atomically (`ModelCheckpoint`,
`TensorBoard`, `save_model`, `chief_path`, ...); `data_order` keeps each epoch's data order a
function of the seed and the epoch (`DataOrder`); `backup` backs up everything that shapes the
next update and resumes from it, at an epoch or mid-epoch (`BackupAndRestore`); `monitor` shows
each worker's step, compute and wait times, speed and memory, and moves adaptive shards
(`TrainingMonitor`), measured by `compute` (the step's `wait_clock`, else `measure`'s probe) and
`utilization`, served by `metrics`.
"""
import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
