"""Worker script: a 2-worker run that serves the training monitor's metrics, then waits.

Usage: `python -m support.metrics_job METRICS_PORT RELEASE_FILE`. Worker 1 sleeps
`SLOW_SECONDS` per example (`support.adaptive_worker.Slow`), so it is the slower one. After
training each worker prints `HISTORY json` (its Keras `History`) and keeps serving until
RELEASE_FILE exists, so that the test reads the last figures while they are served.
"""

import json
import os
import pathlib
import sys
import time

import keras
import tensorflow as tf

import mgpu_tf
from support import adaptive_worker
from support import sharding_problem

EXAMPLES, GLOBAL_BATCH, EPOCHS = 512, 32, 4
SLOW_SECONDS = 0.002
JOB_NAME = "metrics-test"


def main(port, release):
    strategy = mgpu_tf.make_strategy("multi_worker")
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    x, y, initial = sharding_problem.problem(EXAMPLES, seed=5)
    with strategy.scope():
        model = adaptive_worker.build(initial, SLOW_SECONDS if task == 1 else 0.0)
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy,
                                 GLOBAL_BATCH)
    # A probe at every epoch, so that each epoch's compute and wait are measured.
    monitor = mgpu_tf.callbacks.TrainingMonitor(
        global_batch_size=GLOBAL_BATCH, probe_budget=None, metrics_port=port,
        job_name=JOB_NAME)
    history = model.fit(data, epochs=EPOCHS, callbacks=[monitor], verbose=0, shuffle=False)
    logs = {k: [float(v) for v in values] for k, values in history.history.items()}
    print("HISTORY " + json.dumps(logs), flush=True)
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    monitor.metrics.close()
    keras.backend.clear_session()


if __name__ == "__main__":
    main(int(sys.argv[1]), pathlib.Path(sys.argv[2]))
