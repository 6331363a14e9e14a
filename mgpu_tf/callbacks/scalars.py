"""The training monitor's figures as TensorBoard scalars, written by the chief only.

Design: docs/design.md#training-monitor
"""

import glob
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from mgpu_tf.callbacks import chief as chief_lib

__all__ = ["write"]

_NAMES = ("step_ms", "compute_ms", "wait_ms", "examples_per_sec", "memory_mb", "peak_memory_mb",
          "utilization_pct")


def write(log_dir, strategy, record):
    """One interval's scalars (a `TrainingMonitor.history` record) in a new events file of
    `log_dir`, renamed into place, on the chief only."""
    if log_dir is None or not chief_lib.is_chief(strategy):
        return
    scratch = tempfile.mkdtemp(prefix="mgpu_tf-monitor-")
    try:
        writer = tf.summary.create_file_writer(scratch)
        with writer.as_default():
            step = record["step"]
            tf.summary.scalar("monitor/straggler_ratio", record["straggler_ratio"], step)
            for index, unit in enumerate(record["units"]):
                for name in _NAMES:
                    if np.isfinite(unit[name]):
                        tf.summary.scalar(f"monitor/worker_{index}/{name}", unit[name], step)
        writer.close()
        for path in glob.glob(os.path.join(scratch, "events.out.tfevents.*")):
            name = f"{os.path.basename(path)}.step{record['step']}"
            with chief_lib.chief_path(os.path.join(log_dir, name), strategy) as target:
                shutil.copyfile(path, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
