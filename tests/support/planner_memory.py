"""Fresh-process script: the planner's memory estimate against one real training step on the CPU.

Run by tests/test_planner_verified.py and benchmarks/bench_planner_memory.py:

    python -m support.planner_memory [CASE [BATCH]]

CASE is `dense` (8 Dense layers of 2048, the default), `dense-4096x2`, `dense-1024x32`,
`resnet50-224`, `resnet50-112`, `resnet50-fused-224` (batch normalisation by
TensorFlow's fused kernel) or `transformer`. After a warm-up step of a tiny model (so
TensorFlow's kernels and Keras' tracing are already resident), it builds the model, trains
one Adam step on BATCH examples, and prints the growth of the process' peak resident set
(`VmHWM`) over its resident set before the model was built, next to `mgpu_tf.plan`'s
one-device estimate, as `name: value` lines.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import mgpu_tf  # noqa: E402
from support import planner_models  # noqa: E402

CASES = {
    "dense": (lambda: planner_models.dense_stack(2048, 8), 64, "mse"),
    "dense-4096x2": (lambda: planner_models.dense_stack(4096, 2), 64, "mse"),
    "dense-1024x32": (lambda: planner_models.dense_stack(1024, 32), 64, "mse"),
    "resnet50-224": (lambda: planner_models.resnet50(224), 32, "sparse_categorical_crossentropy"),
    "resnet50-112": (lambda: planner_models.resnet50(112), 32, "sparse_categorical_crossentropy"),
    "resnet50-fused-224": (lambda: planner_models.resnet50_fused(224), 32,
                           "sparse_categorical_crossentropy"),
    "transformer": (planner_models.transformer_encoder, 32, "sparse_categorical_crossentropy"),
}


def resident_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_bytes():
    """This process' peak resident set since it started (`VmHWM`).

    Not `getrusage`'s `ru_maxrss`: Linux carries that over `exec` from the process
    that started this one, so a large parent (a test runner) would count as growth.
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmHWM line")


def train_one_step(model, batch, loss):
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
    x = np.ones((batch,) + tuple(model.inputs[0].shape[1:]), "float32")
    if loss == "mse":
        y = np.ones((batch,) + tuple(model.outputs[0].shape[1:]), "float32")
    else:
        y = np.zeros((batch,), "int32")
    model.train_on_batch(x, y)


def main(argv):
    case = argv[1] if len(argv) > 1 else "dense"
    build, batch, loss = CASES[case]
    batch = int(argv[2]) if len(argv) > 2 else batch
    train_one_step(keras.Sequential([keras.Input((2048,)), keras.layers.Dense(8),
                                     keras.layers.Dense(1)]), 8, "mse")
    before = resident_bytes()
    model = build()
    train_one_step(model, batch, loss)
    growth = peak_bytes() - before
    result = mgpu_tf.plan(model, devices=1, device_memory="64GiB", global_batch_size=batch,
                          optimizer="adam", measure_compute=False)
    estimate = result.recommended.peak
    print(f"case: {case}")
    print(f"batch: {batch}")
    print(f"footprint: {result.recommended.footprints[0]}")
    print(f"estimate bytes: {estimate}")
    print(f"measured bytes: {growth}")
    print(f"ratio: {growth / estimate:.3f}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
