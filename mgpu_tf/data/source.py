"""The sources `shard_dataset` reads: checked, called and counted.

Design: docs/design.md#data-sharding
"""

import logging

import tensorflow as tf

from mgpu_tf.compat import private

__all__ = ["check_dataset", "check_spec", "call_function", "count", "count_file",
           "random_access"]

logger = logging.getLogger("mgpu_tf")

_reported = set()  # log-once
# tf.data steps that TensorFlow can read at any index (2.17-2.21), by class name; an
# in-memory `cache` can too, a file cache cannot, and both are one class.
_RANDOM_ACCESS = frozenset((
    "TensorSliceDataset", "TensorDataset", "RangeDataset", "MapDataset", "ParallelMapDataset",
    "ZipDataset", "TakeDataset", "SkipDataset", "ConcatenateDataset", "PrefetchDataset",
    "BatchDataset", "ShardDataset", "RepeatDataset", "OptionsDataset"))


def _batch_op(dataset):
    """Names the batching transformation a data set applies last, if any.

    Without TensorFlow's private list of a data set's inputs, only the last
    transformation is looked at, and that is logged once.
    """
    pending = [dataset]
    while pending:
        node = pending.pop()
        name = type(node).__name__
        if "unbatch" in name.lower():
            continue
        if "batch" in name.lower() or "DenseToRagged" in name:
            return name.strip("_")
        try:
            pending += private.dataset_inputs(node)
        except private.PrivateNameError as error:
            if not _reported:
                _reported.add(True)
                logger.warning("mgpu_tf: shard_dataset checks only the last step of a data "
                               "set for batching: %s", error)
    return None


def check_dataset(dataset):
    """Rejects a data set that is batched, empty or endless, with the fix in the error."""
    batched = _batch_op(dataset)
    if batched:
        raise ValueError(
            f"`source` must be a data set of single examples, but it is already batched "
            f"(it applies {batched}). Received: source={dataset!r}. Remove the .batch() "
            "call: shard_dataset batches with global_batch_size."
        )
    cardinality = int(dataset.cardinality())
    if cardinality == 0:
        raise ValueError(
            f"`source` is an empty data set. Received: source={dataset!r}. Pass a data set "
            "with at least one example."
        )
    if cardinality == tf.data.INFINITE_CARDINALITY:
        raise ValueError(
            f"`source` repeats forever, so an epoch has no end. Received: source={dataset!r}. "
            "Remove the .repeat() call: fit repeats the data set every epoch."
        )


def check_spec(spec):
    """Rejects examples that are not made of dense tensors."""
    for leaf in tf.nest.flatten(spec):
        if not isinstance(leaf, tf.TensorSpec):
            raise TypeError(
                "shard_dataset needs examples made of dense tensors. Received an example "
                f"with {leaf}. Convert ragged or sparse parts to dense tensors in `parse`."
            )


def call_function(function, context):
    """Calls a function source for one input pipeline and checks what it returns."""
    dataset = function(context)
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(
            "The `source` function must return a tf.data.Dataset of single examples. "
            f"Received: {type(dataset).__name__} from source={function!r}"
        )
    check_dataset(dataset)
    return dataset


def count(dataset):
    """Examples in `dataset`: its cardinality when known, else counted by reading it."""
    cardinality = int(dataset.cardinality())
    if cardinality >= 0:
        return cardinality
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1))


def count_file(path, known):
    """Records in a TFRecord file, read once per file version into the dict `known`."""
    stat = tf.io.gfile.stat(path)
    key = (path, stat.length, stat.mtime_nsec)
    if key not in known:
        known[key] = count(tf.data.TFRecordDataset(path))
    return known[key]


def random_access(dataset):
    """Whether each epoch of `dataset` can be shuffled by index (`private.global_shuffle`).

    True when every step of `dataset` is one TensorFlow can read at any index
    (`_RANDOM_ACCESS`); `filter`, `interleave`, `shuffle`, file readers and generators
    cannot. The steps are looked at, not run: a failed try logs a TensorFlow warning.
    """
    pending = [dataset]
    while pending:
        node = pending.pop()
        if type(node).__name__.strip("_") not in _RANDOM_ACCESS:
            return False
        try:
            pending += private.dataset_inputs(node)
        except private.PrivateNameError:
            return False
    return True
