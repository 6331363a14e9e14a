"""A job in calibration mode: times steps of the main job's model on this worker alone.

`python -m support.calibrate_job SLOW_WORKER DELAY` prints `calibrate: examples_per_sec=X`;
worker SLOW_WORKER (from its TF_CONFIG) sleeps DELAY seconds per step, standing in
for a slower GPU.
"""

import sys
import time

import keras
import numpy as np

from mgpu_tf.cluster import detect as cluster
from mgpu_tf.train import build_model

_STEPS, _BATCH = 20, 64


def main(slow_worker, delay):
    index = cluster.detect_cluster().task_index
    rng = np.random.default_rng(0)
    x = rng.standard_normal((_BATCH, 64)).astype("float32")
    y = rng.integers(0, 10, size=_BATCH).astype("int32")
    model = build_model(64, 10, width=64)
    model.compile(optimizer="sgd",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.train_on_batch(x, y)  # tracing, left out of the timing
    start = time.perf_counter()
    for _ in range(_STEPS):
        model.train_on_batch(x, y)
        if index == slow_worker:
            time.sleep(delay)
    seconds = time.perf_counter() - start
    print(f"calibrate: worker={index} examples_per_sec={_STEPS * _BATCH / seconds:.1f}",
          flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]))
