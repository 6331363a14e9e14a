"""The training monitor's figures as TensorBoard scalars, written by the chief only.

Design: docs/design.md#training-monitor
"""

import os
import socket
import time

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
    `log_dir`, renamed into place, on the chief only.

    The file is TensorBoard's record format written directly (`tf.io.TFRecordWriter`), not
    through a `tf.summary` writer: each of those is a TensorFlow resource, which kept
    about 7 KB of the process per interval (docs/benchmarks.md, "Soak").
    """
    if log_dir is None or not chief_lib.is_chief(strategy):
        return
    step, now = record["step"], time.time()
    values = [(figure.tag(None), figure.value(record, None)) for figure in _OF_RECORD]
    for index in range(len(record["units"])):  # a worker's figure not measured is left out
        values += [(figure.tag(index), value) for figure in _OF_WORKER
                   if np.isfinite(value := figure.value(record, index))]
    summary = tf.compat.v1.Summary(value=[
        tf.compat.v1.Summary.Value(tag=tag, simple_value=float(value)) for tag, value in values])
    # TensorBoard reads a directory's files in the order of their names: time, then step.
    name = (f"events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}"
            f".step{step:012d}")
    with chief_lib.chief_path(os.path.join(log_dir, name), strategy) as target:
        with tf.io.TFRecordWriter(target) as events:
            events.write(tf.compat.v1.Event(wall_time=now, file_version="brain.Event:2")
                         .SerializeToString())
            events.write(tf.compat.v1.Event(wall_time=now, step=step, summary=summary)
                         .SerializeToString())
