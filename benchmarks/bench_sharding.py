"""Input-pipeline speed of shard_dataset against TensorFlow's experimental_distribute_dataset.

The same examples, from memory (`from_tensor_slices`) and from TFRecord files, are
read one epoch at a time through both pipelines, without a model:

- tf.distribute: `strategy.experimental_distribute_dataset(source.batch(B))`, with
  TensorFlow's default AUTO sharding across workers;
- mgpu_tf: `mgpu_tf.shard_dataset(source, strategy, B)` (policy "auto").

Settings: mirrored on 2 simulated devices (one process) and multi_worker with 2
local workers (one launch). Within a process the two pipelines alternate over
rounds, after one untimed warm-up epoch each; the median round counts. Also printed:
the time shard_dataset takes to plan (it counts the records of files once per
process), and how much the peak resident memory grew during mgpu_tf's first epoch
(run before TensorFlow's), against the size of the files on disk.

    python benchmarks/bench_sharding.py --rounds 5
"""

import argparse
import os
import resource
import statistics
import tempfile
import time
import types

from mgpu_tf.planner.bench import runner

FEATURES = 64


def _arrays(examples):
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((examples, FEATURES)).astype("float32")
    y = rng.integers(0, 10, size=examples).astype("int64")
    return x, y


def _write_files(directory, examples, files):
    import tensorflow as tf

    x, y = _arrays(examples)
    paths = []
    for index in range(files):
        path = os.path.join(directory, f"part-{index:02d}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for row in range(index, examples, files):
                features = {
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=x[row])),
                    "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[y[row]])),
                }
                writer.write(tf.train.Example(features=tf.train.Features(
                    feature=features)).SerializeToString())
        paths.append(path)
    return paths


def _parse(record):
    import tensorflow as tf

    example = tf.io.parse_single_example(record, {
        "x": tf.io.FixedLenFeature([FEATURES], tf.float32),
        "y": tf.io.FixedLenFeature([], tf.int64),
    })
    return example["x"], example["y"]


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _epoch(dataset):
    """Seconds to read one epoch, fetching every replica's part."""
    start = time.perf_counter()
    for batch in dataset:
        pass
    # Values are fetched asynchronously; wait for the last one.
    import tensorflow as tf

    tf.nest.map_structure(lambda v: v, batch)
    return time.perf_counter() - start


def _pipelines(strategy, source_kind, args):
    import tensorflow as tf

    import mgpu_tf

    if source_kind == "memory":
        x, y = _arrays(args.examples)
        source = tf.data.Dataset.from_tensor_slices((x, y))
        tf_source = source
    else:
        source = sorted(tf.io.gfile.glob(os.path.join(args.directory, "*.tfrecord")))
        tf_source = tf.data.TFRecordDataset(source, num_parallel_reads=4).map(
            _parse, num_parallel_calls=tf.data.AUTOTUNE)
    reference = strategy.experimental_distribute_dataset(
        tf_source.batch(args.batch).prefetch(tf.data.AUTOTUNE))
    start = time.perf_counter()
    ours = mgpu_tf.shard_dataset(source, strategy, args.batch,
                                 parse=_parse if source_kind == "files" else None)
    plan_seconds = time.perf_counter() - start
    return reference, ours, plan_seconds


def _measure(strategy, args):
    """Runs in a process of the setting; returns the figures of this process."""
    figures = {}
    for source_kind in ("memory", "files"):
        reference, ours, plan_seconds = _pipelines(strategy, source_kind, args)
        before = _rss_mb()
        _epoch(ours)  # the warm-up epoch of mgpu_tf's pipeline, before TensorFlow's
        growth = _rss_mb() - before
        _epoch(reference)
        times = {"tf.distribute": [], "mgpu_tf": []}
        for _ in range(args.rounds):
            times["tf.distribute"].append(_epoch(reference))
            times["mgpu_tf"].append(_epoch(ours))
        figures[source_kind] = {
            "tf.distribute": args.examples / statistics.median(times["tf.distribute"]),
            "mgpu_tf": args.examples / statistics.median(times["mgpu_tf"]),
            "plan_seconds": plan_seconds,
            "rss_growth_mb": growth,
        }
    return figures


def run_one(payload):
    """Runs in a fresh process (a worker, for multi_worker); returns its figures."""
    import mgpu_tf

    if payload["setting"] == "mirrored":
        mgpu_tf.simulate_devices(2)
        strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    else:
        strategy = mgpu_tf.make_strategy("multi_worker")
    return _measure(strategy, types.SimpleNamespace(**payload))


def _launch(setting, args):
    payload = {"setting": setting, "directory": args.directory, "examples": args.examples,
               "batch": args.batch, "rounds": args.rounds}
    return runner.run_in_fresh_process(run_one, payload,
                                       workers=1 if setting == "mirrored" else 2,
                                       timeout=3600, label=setting)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--examples", type=int, default=65536)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--settings", default="mirrored,multi_worker")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        args.directory = directory
        _write_files(directory, args.examples, args.files)
        size_mb = sum(os.path.getsize(os.path.join(directory, f))
                      for f in os.listdir(directory)) / 2**20
        print(f"{args.examples} examples of {FEATURES} float32 features, global batch "
              f"{args.batch}, {args.files} TFRecord files ({size_mb:.1f} MB), median of "
              f"{args.rounds} epochs")
        print(f"{'setting':<14}{'source':<8}{'tf.distribute ex/s':>20}{'mgpu_tf ex/s':>14}"
              f"{'ratio':>7}{'plan s':>8}{'peak RSS +MB':>14}")
        for setting in args.settings.split(","):
            figures = _launch(setting, args)
            for source, f in figures.items():
                ratio = f["mgpu_tf"] / f["tf.distribute"]
                print(f"{setting:<14}{source:<8}{f['tf.distribute']:>20.0f}{f['mgpu_tf']:>14.0f}"
                      f"{ratio:>7.2f}{f['plan_seconds']:>8.2f}{f['rss_growth_mb']:>14.1f}",
                      flush=True)


if __name__ == "__main__":
    main()
