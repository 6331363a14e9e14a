"""What a change of adaptive shares costs: the first step after it against a normal step.

Mirrored on 2 logical CPU devices, a small MLP, `shard_dataset(..., weights="adaptive")`
with a fixed schedule of shares (restored into the data set's `AdaptiveShares`, so no
monitor decides): even, even, then sizes never used, back to even, back to the new
sizes, then sizes never used again. Each epoch's first step (the time from the batch's
begin hook to its end hook) is set against the median of the epoch's other steps, with
`jit_compile` off and on, in fresh models of one process. Also noted: the input shapes
the model is traced at. Last, the same model under `TrainingMonitor`, which decides the
shares: the two logical devices share the same cores, identical workers whose shares
should never move. Quote the ratios; the machine may be shared.

Usage: python benchmarks/bench_share_change.py [--batch 2048] [--width 256] [--rounds 2]
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tensorflow as tf  # noqa: E402

import mgpu_tf  # noqa: E402

mgpu_tf.simulate_devices(2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from mgpu_tf.data import adaptive  # noqa: E402

# (share of replica 0, what the epoch's sizes are): the schedule every run follows.
_SCHEDULE = ((0.5, "start"), (0.5, "same sizes"), (0.6875, "new sizes"), (0.6875, "same sizes"),
             (0.5, "sizes seen before"), (0.6875, "sizes seen before"), (0.75, "new sizes"),
             (0.75, "same sizes"))


class _Traced(keras.layers.Layer):
    """Passes its input through; notes the input's static shape each time it is traced."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.shapes = []

    def call(self, x):
        self.shapes.append(tuple(x.shape))
        return x


class _StepTimes(keras.callbacks.Callback):
    """Each step's time, from its batch-begin hook to its batch-end hook, by epoch."""

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs = getattr(self, "epochs", []) + [[]]

    def on_train_batch_begin(self, batch, logs=None):
        self._begin = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.epochs[-1].append(time.perf_counter() - self._begin)


def _setup(args, jit_compile):
    """A mirrored strategy, its adaptive data set and shares, and a model with `_Traced`."""
    strategy = mgpu_tf.make_strategy("mirrored")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch * args.steps, args.width)).astype("float32")
    y = rng.normal(size=(args.batch * args.steps, 1)).astype("float32")
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy,
                                 args.batch, weights="adaptive")
    shares = [s for s in mgpu_tf.kind_of(strategy).adaptive_shares() if s.units == 2][-1]
    with strategy.scope():
        traced = _Traced()
        model = keras.Sequential([keras.Input((args.width,)), traced] + [
            keras.layers.Dense(args.width, activation="relu") for _ in range(3)] + [
            keras.layers.Dense(1)])
        model.compile("sgd", "mse", jit_compile=jit_compile)
    return data, shares, model, traced


def _monitored(args):
    """Replica 0's size in each epoch when `TrainingMonitor` decides, and what moving to
    each single figure's target (`next_shares`, the rule before the size set) would give."""
    data, shares, model, _ = _setup(args, False)
    monitor = mgpu_tf.callbacks.TrainingMonitor(print_table=False)
    model.fit(data, epochs=args.monitor_epochs, verbose=0, callbacks=[monitor])
    decided = [shares.batch_sizes(e, wait=False)[0] for e in range(args.monitor_epochs)]
    single, followed = (0.5, 0.5), [args.batch // 2]
    for record in monitor.history[:-1]:
        speeds = [u["batch"] / u["compute_ms"] for u in record["units"]]
        single = adaptive.next_shares(single, speeds)
        followed.append(round(single[0] * args.batch))
    return decided, followed


def _run(args, jit_compile):
    data, shares, model, traced = _setup(args, jit_compile)
    shares.restore({"schedule": {str(e): [s, 1.0 - s] for e, (s, _) in enumerate(_SCHEDULE)}})
    shares.drive()  # the schedule decides every epoch: fit needs no monitor to steer them
    times = _StepTimes()
    model.fit(data, epochs=len(_SCHEDULE), verbose=0,
              callbacks=[mgpu_tf.callbacks.DataOrder(), times])
    traces = traced.shapes
    sizes = [shares.batch_sizes(e, wait=False) for e in range(len(_SCHEDULE))]
    return times.epochs, traces, sizes


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--monitor_epochs", type=int, default=10)
    args = parser.parse_args()
    print(f"mirrored, 2 logical CPU devices; MLP 3x{args.width}; global batch {args.batch}, "
          f"{args.steps} steps an epoch; {args.rounds} round(s), median", flush=True)
    for jit_compile in (False, True):
        runs = [_run(args, jit_compile) for _ in range(args.rounds)]
        print(f"jit_compile={jit_compile}: model traced at input shapes {runs[0][1]}",
              flush=True)
        excess = {}
        for epoch, (_, what) in enumerate(_SCHEDULE):
            first = statistics.median(r[0][epoch][0] for r in runs)
            normal = statistics.median(statistics.median(r[0][epoch][1:]) for r in runs)
            excess.setdefault(what, []).append(first - normal)
            print(f"  epoch {epoch} sizes {list(runs[0][2][epoch])} ({what}): first step "
                  f"{1000 * first:.0f} ms, normal step {1000 * normal:.0f} ms, "
                  f"first - normal {1000 * (first - normal):.0f} ms", flush=True)
        # Every epoch's first step also starts its iterator: the epochs of the same sizes
        # show what that costs alone.
        usual = statistics.median(excess["same sizes"])
        print(f"  first step over a normal step: {1000 * usual:.0f} ms with the same sizes, "
              f"{1000 * statistics.median(excess['sizes seen before']):.0f} ms with sizes "
              f"seen before, {1000 * statistics.median(excess['new sizes']):.0f} ms with new "
              "sizes", flush=True)
    decided, followed = _monitored(args)
    print(f"TrainingMonitor deciding, {args.monitor_epochs} epochs, replica 0's size: "
          f"{decided}; moving to each figure's target: {followed}", flush=True)


if __name__ == "__main__":
    main()
