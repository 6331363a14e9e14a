"""Fresh-process script: the planner's memory estimate against one real training step on the CPU.

Run by tests/test_planner_verified.py. After a warm-up step of a tiny model (so
TensorFlow's kernels and Keras' tracing are already resident), it builds a
model of ~134 MB of Dense weights, trains one Adam step, and prints the growth of
the process' peak resident memory next to `mgpu_tf.plan`'s one-device estimate.
"""

import os
import resource
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import mgpu_tf  # noqa: E402

BATCH = 64
WIDTH, DEPTH = (int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (2048, 8)


def resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def train_one_step(model, width):
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    x = np.ones((BATCH, width), "float32")
    y = np.ones((BATCH, 1), "float32")
    model.train_on_batch(x, y)


def big_model():
    return keras.Sequential([keras.Input((WIDTH,))]
                            + [keras.layers.Dense(WIDTH, activation="relu") for _ in range(DEPTH)]
                            + [keras.layers.Dense(1)])


def main():
    train_one_step(keras.Sequential([keras.Input((2048,)), keras.layers.Dense(8),
                                     keras.layers.Dense(1)]), 2048)
    before = resident_bytes()
    model = big_model()
    train_one_step(model, WIDTH)
    growth = peak_bytes() - before
    result = mgpu_tf.plan(model, devices=1, device_memory="64GiB", global_batch_size=BATCH,
                          optimizer="adam", measure_compute=False)
    estimate = result.recommended.peak
    print(f"footprint: {result.recommended.footprints[0]}")
    print(f"estimate bytes: {estimate}")
    print(f"measured bytes: {growth}")
    print(f"resident growth after the step: {resident_bytes() - before}")
    print(f"ratio: {growth / estimate:.3f}")


if __name__ == "__main__":
    sys.exit(main())
