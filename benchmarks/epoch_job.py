"""The main job's model and data, with each step timed: for bench_time_to_train.py.

Trains as `python -m mgpu_tf.train` does (the same model, sharded data and `DataOrder`) and
prints one line, `steps: {json}`: the fit's wall clock, each epoch's wall clock and the
time of each of its steps (from the batch's begin hook to its end hook).

With `--per_epoch` the data order callback does not say how many epochs the fit has, so
each epoch makes its own iterator instead of one stream of epochs (`mgpu_tf.data.stream`).
With `--buffer` the source gets a `filter` that keeps every example, so that it cannot be
read by index and each epoch fills a shuffle buffer.

Usage: python benchmarks/epoch_job.py STRATEGY [DEVICES] [EXAMPLES] [BATCH] [EPOCHS]
           [--per_epoch] [--buffer]
"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

import mgpu_tf  # noqa: E402


class _Steps(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs, self.steps, self.begins = [], [], []

    def on_train_begin(self, logs=None):
        self.start = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = time.perf_counter()
        self.begins.append(self._epoch - self.start)
        self.steps.append([])

    def on_train_batch_begin(self, batch, logs=None):
        self._step = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.steps[-1].append(time.perf_counter() - self._step)

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(time.perf_counter() - self._epoch)

    def on_train_end(self, logs=None):
        self.fit = time.perf_counter() - self.start


class _EpochsUntold(mgpu_tf.callbacks.DataOrder):
    def on_epoch_begin(self, epoch, logs=None):
        self._position().set_epoch(epoch)


def main(argv):
    stream, buffer = "--per_epoch" not in argv, "--buffer" in argv
    argv = [a for a in argv if not a.startswith("--")]
    kind = argv[1]
    devices = int(argv[2]) if len(argv) > 2 else 1
    examples, batch, epochs = (int(a) for a in (argv[3:6] if len(argv) > 5
                                                else (65536, 2048, 6)))
    if kind == "mirrored":
        mgpu_tf.simulate_devices(devices)
    import tensorflow as tf

    from mgpu_tf import train

    strategy = mgpu_tf.make_strategy(kind)
    model, data, _, count = train._prepare(
        strategy, dataset="synthetic", global_batch_size=batch, width=256,
        learning_rate=0.01, synthetic_examples=examples, seed=0, jit_compile="auto",
        steps_per_execution=1)
    if buffer:
        (x, y), _ = train.load_data("synthetic", examples=examples, seed=0)
        source = tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda *_: True)
        data = mgpu_tf.shard_dataset(source, strategy, batch, shuffle_seed=0)
    steps = _Steps()
    model.fit(data, epochs=epochs, verbose=0, shuffle=False,
              callbacks=[steps, mgpu_tf.callbacks.DataOrder() if stream else _EpochsUntold()])
    print("steps: " + json.dumps({"fit": steps.fit, "epochs": steps.epochs,
                                  "begins": steps.begins, "steps": steps.steps,
                                  "examples": count}),
          flush=True)


if __name__ == "__main__":
    main(sys.argv)
