"""The tf.data pipelines of a sharding layout: who reads what, and each replica's batches.

A replica's pipeline reads its worker's examples and keeps its own, parsing each record once;
replicas with nothing left get empty batches up to the planned number of steps.

Design: docs/design.md#input-pipelines
"""

import logging

import numpy as np
import tensorflow as tf

from mgpu_tf.base import kind as kind_lib
from mgpu_tf.compat import private
from mgpu_tf.data import in_memory
from mgpu_tf.data import order
from mgpu_tf.data import plan as plan_lib
from mgpu_tf.data import replica_weights
from mgpu_tf.data import split
from mgpu_tf.data import stream

__all__ = ["distribute", "probe_all"]

logger = logging.getLogger("mgpu_tf")

# Examples held by the shuffle buffer of a file source; the file order is shuffled too.
_FILE_SHUFFLE_BUFFER = 10_000
_FILE_READERS = 4


def probe_all(request):
    """The whole source as one data set (a function's is called for one pipeline)."""
    if request.source_kind == "function":
        return request.function_dataset()
    return request.source


def _shuffle(dataset, request, size, epoch, salt=0):
    """Shuffles in an order that depends on the seed and the epoch only (`mgpu_tf.data.order`)."""
    if request.seed is None:
        return dataset
    return dataset.shuffle(max(1, size), seed=order.epoch_seed(request.seed, epoch, salt),
                           reshuffle_each_iteration=False)


def _parsed(request, examples, parse):
    return request.examples(examples) if parse else examples


def _read_files(files):
    names = tf.data.Dataset.from_tensor_slices(list(files))
    return names, lambda names: names.interleave(
        tf.data.TFRecordDataset, cycle_length=min(len(files), _FILE_READERS),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _file_examples(request, files, size, parse, epoch):
    names, read = _read_files(files)
    examples = read(_shuffle(names, request, len(files), epoch, salt=1))
    return _shuffle(_parsed(request, examples, parse), request,
                    min(size, _FILE_SHUFFLE_BUFFER), epoch)


def _global_examples(request, plan, parse, epoch):
    """All examples, in an order that is the same on every worker."""
    if request.source_kind == "files":
        return _file_examples(request, request.files, plan.num_examples, parse, epoch)
    if request.random_access:
        # Read by index in the epoch's order: the first batch needs no buffer filled.
        shuffled = private.global_shuffle(request.source, order.epoch_seed(request.seed, epoch))
        return _parsed(request, shuffled, parse)
    return _shuffle(_parsed(request, probe_all(request), parse), request, plan.num_examples,
                    epoch)


def _worker_examples(request, plan, worker, parse, epoch):
    """The stream of one worker under the `"file"` and `"off"` policies."""
    if plan.worker_files is not None:
        return _file_examples(request, plan.worker_files[worker],
                              plan.worker_examples[worker], parse, epoch)
    if request.source_kind == "function":
        examples = request.function_dataset(worker, plan.num_workers)
        return _shuffle(_parsed(request, examples, parse), request,
                        plan.worker_examples[worker], epoch)
    return _global_examples(request, plan, parse, epoch)


def _one_empty_batch(spec):
    """A data set of one batch of no examples, for a data set of examples of `spec`.

    Its batch size is unknown to shape inference, as a batch of examples' is: a replica
    whose every step is empty gives batches of the spec its peers give.
    """
    def empty(rows):
        return tf.nest.map_structure(
            lambda s: tf.zeros(tf.stack([rows] + [d if d is not None else 0 for d in s.shape]),
                               s.dtype), spec)

    return tf.data.Dataset.from_tensors(np.int64(0)).map(empty)


def _keep(batch, positions):
    """The rows of `batch` at `positions` (a sorted block pattern), cut to its length."""
    length = tf.shape(tf.nest.flatten(batch)[0], out_type=tf.int64)[0]
    rows = positions[: tf.reduce_sum(tf.cast(positions < length, tf.int32))]
    return tf.nest.map_structure(lambda t: tf.gather(t, rows), batch)


def _positions(pattern, owner):
    return tf.constant([p for p, o in enumerate(pattern) if o == owner], tf.int64)


def _worker_batches(request, plan, worker, parse, epoch):
    """One worker's batches, one per step, until its examples run out."""
    size = plan.worker_batch_sizes[worker]
    drop = request.drop_remainder
    if plan.policy != plan_lib.ShardPolicy.DATA:
        examples = _worker_examples(request, plan, worker, parse, epoch)
        return examples.take(plan.worker_examples[worker]).batch(max(size, 1),
                                                                 drop_remainder=drop)
    if request.in_memory is not None:
        mine = (in_memory.every(worker, plan.num_workers, plan.global_batch_size)
                if len(set(plan.worker_batch_sizes)) == 1 else _positions(plan.pattern, worker))
        return _rows(request, plan, epoch, mine)
    examples = _global_examples(request, plan, parse, epoch)
    if plan.num_workers == 1:
        return examples.batch(size, drop_remainder=drop)
    if len(set(plan.worker_batch_sizes)) == 1:
        # Equal shares: the round robin of each block is every n-th example.
        return examples.take(plan.steps * plan.global_batch_size if drop else -1).shard(
            plan.num_workers, worker).batch(size, drop_remainder=drop)
    mine = _positions(plan.pattern, worker)
    blocks = examples.batch(plan.global_batch_size, drop_remainder=drop)
    return blocks.enumerate().map(lambda _, block: _keep(block, mine),
                                  num_parallel_calls=tf.data.AUTOTUNE)


def _replica_batches(request, plan, worker, replica, epoch):
    """One replica's non-empty batches, in step order (only the last may be short)."""
    size = plan.batch_sizes[worker * plan.replicas_per_worker + replica]
    local = plan.local_sizes(worker)
    drop = request.drop_remainder
    if len(set(plan.batch_sizes)) == 1 and plan.policy == plan_lib.ShardPolicy.DATA:
        offset = worker + plan.num_workers * replica
        if request.in_memory is not None:
            return _rows(request, plan, epoch, in_memory.every(
                offset, plan.num_replicas, plan.global_batch_size))
        # Every R-th example from offset w + W * l: read all, parse only its own.
        examples = _global_examples(request, plan, False, epoch)
        examples = examples.take(plan.steps * plan.global_batch_size if drop else -1).shard(
            plan.num_replicas, offset)
        return request.examples(examples).batch(size, drop_remainder=drop)
    if len(set(local)) == 1 and plan.policy != plan_lib.ShardPolicy.DATA:
        examples = _worker_examples(request, plan, worker, False, epoch).take(
            plan.worker_examples[worker]).shard(plan.replicas_per_worker, replica)
        return request.examples(examples).batch(size, drop_remainder=drop)
    batches = _worker_batches(request, plan, worker, False, epoch)
    if plan.replicas_per_worker > 1:
        mine = _positions(split.smooth_pattern(tuple(local)), replica)
        batches = batches.enumerate().map(lambda _, batch: _keep(batch, mine),
                                          num_parallel_calls=tf.data.AUTOTUNE)
    if request.parse is None:
        return batches
    # Parsed after the cut, so that each replica parses only its own examples.
    return request.examples(batches.unbatch()).batch(size)


def _corrects(request, plan):
    """Whether batches carry loss-correction weights: replicas' batches can differ."""
    uneven = plan.uneven or request.adaptive is not None
    return uneven and plan.num_replicas > 1 and request.weighs_loss


def _weigh(request, plan, step, batch):
    """Adds the loss-correction weights when replicas' batches can differ."""
    if not _corrects(request, plan):
        return batch
    totals = plan.tail_totals or (plan.global_batch_size,)
    tail = tf.constant(totals, tf.int64)
    index = tf.clip_by_value(step - plan.full_steps, 0, len(totals) - 1)
    step_total = tf.where(step < plan.full_steps,
                          tf.constant(plan.global_batch_size, tf.int64), tail[index])
    weights = replica_weights.correction_weights(batch, step_total, plan.num_replicas)
    return replica_weights.attach_weights(batch, weights)


def _padded(request, plan, batches, filled):
    """Pads `filled` non-empty batches with empty ones to `plan.steps`, and weighs them."""
    if filled < plan.steps:
        empty = _one_empty_batch(request.spec)
        batches = batches.take(filled).concatenate(empty.repeat(plan.steps - filled))
    if _corrects(request, plan):
        batches = batches.enumerate().map(lambda step, batch: _weigh(request, plan, step, batch),
                                          num_parallel_calls=tf.data.AUTOTUNE)
    return batches


def _finish(request, batches):
    if request.batch_map is not None:  # a model's preprocessing (data.preprocessing)
        batches = batches.map(request.batch_map, num_parallel_calls=tf.data.AUTOTUNE,
                              deterministic=True)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return batches.prefetch(tf.data.AUTOTUNE).with_options(options)


def _concatenated(request, plan, step, batches):
    """One step's batches of several local replicas, in turn, weighed."""
    pieces = [tf.data.Dataset.from_tensors(_weigh(request, plan, step, b)) for b in batches]
    out = pieces[0]
    for piece in pieces[1:]:
        out = out.concatenate(piece)
    return out


def _step_pieces(request, plan, step, block, positions):
    """One step's batches of several local replicas, in turn: the rows of `block` each keeps."""
    return _concatenated(request, plan, step, [_keep(block, mine) for mine in positions])


def _rows(request, plan, epoch, positions):
    """Each step's rows at `positions` of its block, from the source held in memory."""
    return in_memory.rows(request.in_memory, request.seed, epoch, plan.global_batch_size,
                          request.drop_remainder, positions)


def _stride(positions, block):
    """`[start, step]` when `positions` are every step-th slot of a block from start (equal
    shares), else `[-1, 0]`."""
    if len(positions) > 1 and block % len(positions) == 0:
        step = block // len(positions)
        if np.array_equal(positions, np.arange(positions[0], block, step)):
            return np.array([positions[0], step], np.int64)
    return np.array([-1, 0], np.int64)


def _strided_batches(request, plan, epoch, stride, size):
    """Every `stride[1]`-th example from `stride[0]`, as `.shard` reads equal shares: only
    these are parsed and copied, where a block's cut copies all of it."""
    examples = _global_examples(request, plan, False, epoch)
    drop = request.drop_remainder
    examples = examples.take(plan.steps * plan.global_batch_size if drop else -1).shard(
        tf.maximum(stride[1], 1), tf.maximum(stride[0], 0))
    return request.examples(examples).batch(size, drop_remainder=drop)


def _adaptive_epoch(request, plan, worker, replicas, epoch):
    """One epoch of adaptive shares (`mgpu_tf.data.adaptive.shares`) for some of a worker's replicas."""
    shares = request.adaptive
    mine = [tf.reshape(tf.numpy_function(
        lambda e, r=r: shares.positions(e, worker, r), [epoch], tf.int64, stateful=True),
        [-1]) for r in replicas]
    if request.in_memory is not None and len(mine) == 1:
        return _rows(request, plan, epoch, mine[0]).enumerate().map(
            lambda step, batch: _weigh(request, plan, step, batch),
            num_parallel_calls=tf.data.AUTOTUNE)
    if request.in_memory is not None:
        pieces = tf.data.Dataset.zip(tuple(_rows(request, plan, epoch, m) for m in mine))
        return pieces.enumerate().flat_map(
            lambda step, pieces: _concatenated(request, plan, step, pieces))
    blocks = _global_examples(request, plan, True, epoch).batch(
        plan.global_batch_size, drop_remainder=request.drop_remainder)
    if len(mine) > 1:
        return blocks.enumerate().flat_map(
            lambda step, block: _step_pieces(request, plan, step, block, mine))
    cut = blocks.enumerate().map(lambda _, block: _keep(block, mine[0]),
                                 num_parallel_calls=tf.data.AUTOTUNE)
    # Equal shares, as on identical workers, read like even ones.
    stride = tf.numpy_function(lambda p: _stride(p, plan.global_batch_size), [mine[0]],
                               tf.int64, stateful=False)
    strided = _strided_batches(request, plan, epoch, stride, tf.size(mine[0], tf.int64))
    # A last block too short to reach this replica's first slot still makes a step.
    strided = strided.concatenate(
        _one_empty_batch(request.spec).repeat()).take(blocks.cardinality())
    batches = tf.data.Dataset.choose_from_datasets(
        [cut, strided], tf.data.Dataset.from_tensors(tf.cast(stride[0] >= 0, tf.int64)).repeat())
    return batches.enumerate().map(lambda step, batch: _weigh(request, plan, step, batch),
                                   num_parallel_calls=tf.data.AUTOTUNE)


def _replica_epoch(request, plan, worker, replica, epoch):
    """Exactly `plan.steps` batches of one epoch for one replica: its pieces, then empty ones."""
    if request.adaptive is not None:
        return _adaptive_epoch(request, plan, worker, [replica], epoch)
    share = plan.shares[worker * plan.replicas_per_worker + replica]
    batches = _replica_batches(request, plan, worker, replica, epoch) if share.batches else (
        _one_empty_batch(request.spec).take(0))
    return _padded(request, plan, batches.take(share.batches), share.batches)


def _replica_dataset(request, plan, worker, replica, epochs, endless=False):
    """One replica's batches of the epoch at its strategy's position (`mgpu_tf.data.order`),
    or, `endless`, of each epoch after it in turn."""
    return _finish(request, order.follow(
        lambda epoch: _replica_epoch(request, plan, worker, replica, epoch),
        epochs.reader(request.seed is not None, endless), plan.steps, endless=endless))


def _worker_epoch(request, plan, worker, epoch):
    """All local replicas' batches of one epoch, in turn, for one multi-worker input pipeline."""
    if request.adaptive is not None:
        return _adaptive_epoch(request, plan, worker, range(plan.replicas_per_worker), epoch)
    own = max(plan.shares[worker * plan.replicas_per_worker + r].batches
              for r in range(plan.replicas_per_worker))
    batches = _worker_batches(request, plan, worker, True, epoch)
    if own < plan.steps:
        empty = _one_empty_batch(request.spec)
        batches = batches.take(own).concatenate(empty.repeat(plan.steps - own))

    pattern = split.smooth_pattern(tuple(plan.local_sizes(worker)))
    mine = [_positions(pattern, r) for r in range(plan.replicas_per_worker)]
    return batches.enumerate().flat_map(
        lambda step, batch: _step_pieces(request, plan, step, batch, mine))


def _worker_dataset(request, plan, worker, epochs, endless=False):
    """One multi-worker input pipeline: its replicas' batches of the epoch at the position
    (or, `endless`, of each epoch after it in turn)."""
    if plan.replicas_per_worker == 1:
        return _replica_dataset(request, plan, worker, 0, epochs, endless)
    # The cardinality stays unknown: TensorFlow would count batches, not steps. A
    # resumed epoch skips whole steps: each step is `replicas_per_worker` batches.
    return _finish(request, order.follow(
        lambda epoch: _worker_epoch(request, plan, worker, epoch),
        epochs.reader(request.seed is not None, endless), skip_unit=plan.replicas_per_worker,
        endless=endless))


def distribute(request, plan):
    """What `model.fit` takes under the request's strategy, for the planned layout."""
    if plan.uneven and plan.num_replicas > 1 and request.training and not request.can_weigh:
        logger.warning(
            "mgpu_tf: examples are not (x, y) tuples, so replicas' unequal batches in the "
            "last step(s) are not reweighted; their loss is slightly biased.")
    strategy = request.strategy

    def make(endless):
        return kind_lib.kind_of(strategy).distribute_datasets(
            lambda replica: _replica_dataset(request, plan, 0, replica, epochs, endless),
            lambda worker: _worker_dataset(request, plan, worker, epochs, endless))

    epochs = stream.EpochStream(order.position_of(strategy), lambda: make(endless=True),
                                plan.steps)
    return epochs.attach(make(endless=False))
