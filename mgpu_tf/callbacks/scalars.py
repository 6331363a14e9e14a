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
from mgpu_tf.callbacks import figures

__all__ = ["write"]

_SCALARS = tuple(f for f in figures.FIGURES if f.scalar)
_OF_RECORD = tuple(f for f in _SCALARS if f.source == figures.Source.RECORD)
_OF_WORKER = tuple(f for f in _SCALARS if f.source != figures.Source.RECORD)


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
            for figure in _OF_RECORD:
                tf.summary.scalar(figure.tag(None), figure.value(record, None), step)
            for index in range(len(record["units"])):
                for figure in _OF_WORKER:
                    value = figure.value(record, index)
                    if np.isfinite(value):
                        tf.summary.scalar(figure.tag(index), value, step)
        writer.close()
        for path in glob.glob(os.path.join(scratch, "events.out.tfevents.*")):
            name = f"{os.path.basename(path)}.step{record['step']}"
            with chief_lib.chief_path(os.path.join(log_dir, name), strategy) as target:
                shutil.copyfile(path, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
