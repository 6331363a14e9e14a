"""Worker script: shard_dataset under make_strategy("multi_worker"), several checks per run.

Usage: `python -m support.sharding_worker DIR`. DIR holds TFRecord files the test wrote:
`ids-*.tfrecord` (997 examples), `fit-*.tfrecord` (problem(100, seed=1)) and
`one-00.tfrecord`. Each result is printed as one `TAG json` line. After the line
`CONTROL` the script runs TensorFlow's own `experimental_distribute_dataset`, so
the test can tell its autoshard warning from ours (there must be none before it).
`CONTROL` goes to standard error, where TensorFlow logs: the launcher relays each stream in
its own order, not the two streams in the order they were written.
MGPU_TF_TEST_TRANSPORT picks the make_strategy transport (default: tensorflow).
"""

import json
import os
import pathlib
import sys

import numpy as np
import tensorflow as tf

import mgpu_tf
from support import sharding_problem


def report(tag, value):
    print(f"{tag} {json.dumps(value)}", flush=True)


def ids(count):
    return tf.data.Dataset.from_tensor_slices(
        (np.arange(count, dtype="int64"), np.zeros(count, "float32")))


def seen(strategy, data):
    """This worker's ids in each step (one replica per worker on a CPU)."""
    steps = []
    for batch in data:
        parts = strategy.experimental_local_results(batch[0])
        steps.append([i for part in parts for i in part.numpy().tolist()])
    return steps


def main(directory):
    strategy = mgpu_tf.make_strategy(
        "multi_worker", transport=os.environ.get("MGPU_TF_TEST_TRANSPORT", "tensorflow"))
    workers = strategy.num_replicas_in_sync

    for tag, call in [
        ("off", lambda: mgpu_tf.shard_dataset(ids(997), strategy, 12, policy="off")),
        ("file", lambda: mgpu_tf.shard_dataset([str(directory / "one-00.tfrecord")], strategy,
                                               12, policy="file", parse=sharding_problem.parse_id)),
    ]:
        try:
            call()
            report(f"ERROR_{tag}", None)
        except ValueError as error:
            report(f"ERROR_{tag}", str(error))

    report("SEEN_data", seen(strategy, mgpu_tf.shard_dataset(
        ids(997), strategy, 12, shuffle_seed=7)))
    report("SEEN_file", seen(strategy, mgpu_tf.shard_dataset(
        [str(directory / "ids-*.tfrecord")], strategy, 12, parse=sharding_problem.parse_id,
        shuffle_seed=7)))

    report("SEEN_function", seen(strategy, mgpu_tf.shard_dataset(
        lambda context: ids(997).shard(context.num_input_pipelines, context.input_pipeline_id),
        strategy, 12)))

    x, y, initial = sharding_problem.problem(100)
    with strategy.scope():
        model = mgpu_tf.prepare_model(sharding_problem.build_model(initial), strategy)
    weights = [2, 1] if workers == 2 else None
    model.fit(mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, 12,
                                    weights=weights), epochs=1, shuffle=False, verbose=0)
    report("WEIGHTS_data", sharding_problem.to_json(model.get_weights()))

    _, _, initial = sharding_problem.problem(100, seed=1)
    with strategy.scope():
        model = mgpu_tf.prepare_model(sharding_problem.build_model(initial), strategy)
    model.fit(mgpu_tf.shard_dataset([str(directory / "fit-*.tfrecord")], strategy, 12,
                                    parse=sharding_problem.parse_xy),
              epochs=1, shuffle=False, verbose=0)
    report("WEIGHTS_file", sharding_problem.to_json(model.get_weights()))

    print("CONTROL", file=sys.stderr, flush=True)
    control = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(12))
    next(iter(control))
    report("DONE", workers)


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
