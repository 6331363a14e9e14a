"""Dataset sharding: even, exactly once, and weighted for mixed hardware.

`shard_dataset` turns a data set of single examples into what `model.fit` takes under a
strategy, each example seen once per epoch; `describe_sharding` prints the layout.

Design: docs/design.md#data-sharding
"""

import copy
import functools
import logging
import numbers
import os

import tensorflow as tf

from mgpu_tf.data import in_memory
from mgpu_tf.data import marks
from mgpu_tf.data import order
from mgpu_tf.data import pipeline as shard_pipeline
from mgpu_tf.data import plan as plan_lib
from mgpu_tf.data import preprocessing
from mgpu_tf.data import replica_weights
from mgpu_tf.data import source as shard_source
from mgpu_tf.data import split
from mgpu_tf.data.adaptive import start as adaptive_start
from mgpu_tf.strategies import kinds

__all__ = ["shard_dataset", "describe_sharding"]

logger = logging.getLogger("mgpu_tf")


class _Request:
    """A checked `shard_dataset` call: everything but the example counts."""

    def __init__(self, source, strategy, global_batch_size, policy, weights, drop_remainder,
                 shuffle_seed, parse, training=True):
        self.kind, self.num_workers, self.replicas_per_worker = _topology(strategy)
        self.strategy = strategy
        self.adaptive = adaptive_start.from_weights(weights, global_batch_size, self.num_workers,
                                                    self.replicas_per_worker)
        if self.adaptive is not None:
            self.batch_sizes = self.adaptive.first_batch_sizes
        else:
            self.batch_sizes = split.replica_batch_sizes(
                global_batch_size, self.num_workers, self.replicas_per_worker, weights)
        self.weighted = weights is not None
        if not isinstance(drop_remainder, bool):
            raise TypeError(
                "`drop_remainder` must be True or False. "
                f"Received: drop_remainder={drop_remainder!r}"
            )
        if shuffle_seed is not None and (isinstance(shuffle_seed, bool) or not isinstance(
                shuffle_seed, numbers.Integral)):
            raise TypeError(
                "`shuffle_seed` must be an integer or None. "
                f"Received: shuffle_seed={shuffle_seed!r}"
            )
        if shuffle_seed is not None and not 0 <= shuffle_seed < 2**31:
            # Orders are drawn from the seed modulo 2**31: -1 would shuffle as 2**31 - 1 does.
            raise ValueError(
                "`shuffle_seed` must be from 0 to 2**31 - 1, each giving its own order. "
                f"Received: shuffle_seed={shuffle_seed}. Use a non-negative integer below "
                "2**31, or None for the source's order."
            )
        if not isinstance(training, bool):
            raise TypeError(f"`training` must be True or False. Received: training={training!r}")
        if parse is not None and not callable(parse):
            raise TypeError(f"`parse` must be a function or None. Received: parse={parse!r}")
        self.drop_remainder = drop_remainder
        self.seed = None if shuffle_seed is None else int(shuffle_seed)
        self.parse = parse
        self.batch_map = None  # a model's preprocessing of each replica's batches
        self.source, self.files = source, None
        self._function_calls = {}
        self.source_kind = _source_kind(source)
        if self.source_kind == "files":
            self.files = _expand_patterns([source] if isinstance(source, str) else list(source))
        self.policy, self.reason = _choose_policy(policy, self)
        if self.source_kind == "dataset":
            shard_source.check_dataset(source)
        # Shuffled by index where the source allows: no buffer fills as an epoch starts.
        self.random_access = (self.source_kind == "dataset" and self.seed is not None
                              and shard_source.random_access(source))
        # Shuffled and unparsed in memory: each replica gathers its own rows of a step.
        self.in_memory = (in_memory.hold(source) if self.random_access and parse is None
                          else None)
        spec = self.examples(self._probe_input()).element_spec
        shard_source.check_spec(spec)
        self.spec = spec
        self.can_weigh = replica_weights.can_weigh(spec)
        # Only updates need the correction; without it, what `evaluate` shows is the mean.
        self.training = training
        self.weighs_loss = training and self.can_weigh
        if training and self.weighted and not self.can_weigh:
            raise ValueError(
                "`weights` need examples of the form (x, y) or (x, y, sample_weight), to "
                f"correct the loss through sample weights. Received examples: {spec}. "
                "Return (x, y) tuples from the source (or from `parse`)."
            )

    @property
    def num_replicas(self):
        return self.num_workers * self.replicas_per_worker

    def context(self, worker=0, workers=1):
        return tf.distribute.InputContext(num_input_pipelines=workers, input_pipeline_id=worker,
                                          num_replicas_in_sync=self.num_replicas)

    def function_dataset(self, worker=0, workers=1):
        """What a function source returns for one of `workers` pipelines, called once, eagerly."""
        if (worker, workers) not in self._function_calls:
            self._function_calls[worker, workers] = shard_source.call_function(
                self.source, self.context(worker, workers))
        return self._function_calls[worker, workers]

    def _probe_input(self):
        if self.source_kind == "files":
            return tf.data.TFRecordDataset(self.files[:1])
        if self.source_kind == "function":
            workers = self.num_workers if self.policy == plan_lib.ShardPolicy.OFF else 1
            return self.function_dataset(0, workers)
        return self.source

    def examples(self, raw):
        """Applies `parse` to a data set of records."""
        if self.parse is None:
            return raw
        return raw.map(self.parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _topology(strategy):
    """Returns (pipeline, workers, replicas per worker) of a strategy (its kind's data layout)."""
    try:
        kind = kinds.kind_of(strategy)
    except TypeError:
        raise TypeError(
            "`strategy` must be a strategy, such as mgpu_tf.make_strategy() returns. "
            f"Received: strategy={strategy!r}"
        ) from None
    return kind.data_layout()


def _source_kind(source):
    if isinstance(source, tf.distribute.DistributedDataset):
        raise TypeError(
            "`source` is already distributed. Received: source="
            f"{type(source).__name__}. Pass the tf.data.Dataset of single examples instead."
        )
    if isinstance(source, tf.data.Dataset):
        return "dataset"
    if isinstance(source, str) or (isinstance(source, (list, tuple)) and source and all(
            isinstance(p, (str, os.PathLike)) for p in source)):
        return "files"
    if callable(source):
        return "function"
    raise TypeError(
        "`source` must be a tf.data.Dataset of single examples, a list of TFRecord file "
        "patterns, or a function of tf.distribute.InputContext returning such a data set. "
        f"Received: source={_describe(source)}.{_from_arrays_hint(source)}"
    )


def _describe(value):
    """A value by its type and shape, never its contents (arrays can be gigabytes)."""
    if isinstance(value, (list, tuple)) and len(value) <= 4:
        return f"{type(value).__name__} of ({', '.join(_describe(v) for v in value)})"
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{type(value).__name__} of shape {tuple(shape)}"
    if isinstance(value, (list, tuple, dict)):
        return f"{type(value).__name__} of {len(value)} items"
    return type(value).__name__


def _from_arrays_hint(source):
    items = source if isinstance(source, (list, tuple)) else [source]
    if items and all(hasattr(item, "shape") for item in items):
        arguments = "(x, y)" if len(items) > 1 else "x"
        return (f" Wrap arrays in a data set: "
                f"tf.data.Dataset.from_tensor_slices({arguments}).")
    return ""


def _expand_patterns(patterns):
    files = []
    for pattern in patterns:
        pattern = os.fspath(pattern)
        matches = sorted(tf.io.gfile.glob(pattern))
        if not matches:
            raise ValueError(
                f"The file pattern {pattern!r} matches no file. Received: source={patterns!r}. "
                "Check the path, or write the TFRecord files first."
            )
        files += [m for m in matches if m not in files]
    return files


def _choose_policy(policy, request):
    choices = [p.value for p in plan_lib.ShardPolicy]
    try:
        policy = plan_lib.ShardPolicy(policy.lower() if isinstance(policy, str) else policy)
    except ValueError:
        raise ValueError(
            f"`policy` must be one of {', '.join(choices)}. Received: policy={policy!r}"
        ) from None
    if request.adaptive is not None:
        return adaptive_start.choose_policy(policy, request.source_kind)
    workers, kind = request.num_workers, request.source_kind
    files = len(request.files or ())
    if policy == plan_lib.ShardPolicy.AUTO:
        if kind == "function":
            chosen, why = plan_lib.ShardPolicy.OFF, "the input function shards by worker"
        elif kind == "files" and files >= workers:
            chosen, why = plan_lib.ShardPolicy.FILE, f"{files} files for {workers} worker(s)"
        elif kind == "files":
            chosen, why = plan_lib.ShardPolicy.DATA, f"{files} files < {workers} workers"
        else:
            chosen, why = plan_lib.ShardPolicy.DATA, "the source is a data set, not files"
        logged = kinds.kind_of(request.strategy).logged_policies
        if (chosen, why) not in logged:  # the training and the test data set, once
            logged.add((chosen, why))
            logger.info("mgpu_tf: sharding policy 'auto' chose %r: %s.", chosen.value, why)
        return chosen, f"auto: {why}"
    if policy == plan_lib.ShardPolicy.FILE:
        if kind != "files":
            raise ValueError(
                "`policy='file'` needs a list of TFRecord file patterns as `source`. "
                f"Received: policy='file', source={type(request.source).__name__}. "
                "Use policy='data' (or 'auto')."
            )
        if files < workers:
            raise ValueError(
                f"`policy='file'` needs at least as many files as workers ({workers}); the "
                f"patterns match {files} file(s). Received: policy='file'. Use policy='data' "
                "(or 'auto'), or write the data into more files."
            )
    if policy == plan_lib.ShardPolicy.OFF and workers > 1 and kind != "function":
        raise ValueError(
            f"`policy='off'` would give each of the {workers} workers the whole data set, so "
            f"every example would be seen {workers} times per epoch. Received: policy='off'. "
            "Use 'auto', 'data' or 'file', or pass a function of tf.distribute.InputContext "
            "that shards by itself."
        )
    return policy, "requested"


# ------------------------------------------------------------------ counting


def _empty_source(request):
    return ValueError(
        f"`source` holds no examples. Received: source={request.source!r}. Pass a source "
        "with at least one example."
    )


def _make_plan(request):
    """Counts the examples (records before `parse`; reading only when unknown) and plans."""
    common = dict(batch_sizes=request.batch_sizes, num_workers=request.num_workers,
                  replicas_per_worker=request.replicas_per_worker,
                  drop_remainder=request.drop_remainder, reason=request.reason)
    if request.source_kind == "files":
        known = kinds.kind_of(request.strategy).record_counts
        counts = [shard_source.count_file(path, known) for path in request.files]
        if not sum(counts):
            raise _empty_source(request)
        if request.policy == plan_lib.ShardPolicy.DATA:
            return plan_lib.plan_data(sum(counts), **common)
        if request.policy == plan_lib.ShardPolicy.OFF:
            return plan_lib.plan_streams([sum(counts)], policy="off", **common)
        owned = split.assign_files(counts, split.worker_batch_sizes(
            request.batch_sizes, request.replicas_per_worker))
        files = tuple(tuple(request.files[i] for i in own) for own in owned)
        return plan_lib.plan_streams([sum(counts[i] for i in own) for own in owned],
                                     policy="file", worker_files=files, **common)
    if request.source_kind == "function" and request.policy == plan_lib.ShardPolicy.OFF:
        counts = [shard_source.count(request.function_dataset(w, request.num_workers))
                  for w in range(request.num_workers)]
        if not sum(counts):
            raise _empty_source(request)
        return plan_lib.plan_streams(counts, policy="off", **common)
    count = shard_source.count(shard_pipeline.probe_all(request))
    if not count:
        raise _empty_source(request)
    if request.policy == plan_lib.ShardPolicy.OFF:
        return plan_lib.plan_streams([count], policy="off", **common)
    return plan_lib.plan_data(count, **common)


# -------------------------------------------------------------------- public


def describe_sharding(source, strategy, global_batch_size, *, policy="auto", weights=None,
                      drop_remainder=False, shuffle_seed=None, parse=None, print_table=True):
    """Prints and returns what each worker and replica gets per epoch.

    Takes the arguments of `shard_dataset` (and `print_table`, defaulting to `True`) and
    builds no pipeline.

    Example:

    ```python
    plan = mgpu_tf.describe_sharding(dataset, strategy, 12)
    # worker  replica  batch  examples  batches  last batch  empty steps
    #      0        0      3       249       83           3            1
    plan.steps  # 84
    ```

    Returns:
        A `mgpu_tf.data.plan.ShardingPlan`: per-replica `shares`, `steps`, `policy` and more.
    """
    request = _Request(source, strategy, global_batch_size, policy, weights, drop_remainder,
                       shuffle_seed, parse)
    plan = _make_plan(request)
    if print_table:
        print(plan.table())
    return plan


def shard_dataset(source, strategy, global_batch_size, *, policy="auto", weights=None,
                  drop_remainder=False, shuffle_seed=None, parse=None, training=True):
    """Shards a data set over a strategy's workers and replicas, each example once.

    Returns a `tf.data.Dataset` of batches (default, one_device) or a
    `tf.distribute.DistributedDataset` (mirrored, multi_worker). The options are
    described at length in docs/api/sharding.md.

    Example:

    ```python
    mgpu_tf.simulate_devices(2)
    strategy = mgpu_tf.make_strategy("mirrored")
    with strategy.scope():
        model = build_and_compile_model()
    model.fit(mgpu_tf.shard_dataset(examples, strategy, 64, weights=[2, 1]), epochs=3)
    ```

    Args:
        source: a `tf.data.Dataset` of single examples, TFRecord file patterns, or a
            function of a `tf.distribute.InputContext` returning such a data set.
        strategy: the strategy `model` was built under.
        global_batch_size: examples per step over all replicas.
        policy: `"file"`, `"data"`, `"off"` or `"auto"`. Defaults to `"auto"`.
        weights: relative speeds, one per worker (or per replica on one worker), or
            `"adaptive"`. Defaults to `None` (equal batches).
        drop_remainder: leave out examples that do not fill a whole step. Defaults to `False`.
        shuffle_seed: shuffle each epoch in an order drawn from the seed (0 to 2**31 - 1)
            and the epoch. Defaults to `None` (source order).
        parse: a function applied to each example before batching. Defaults to `None`.
        training: `False` for a data set that is only evaluated. Defaults to `True`.

    Raises:
        TypeError: for wrong types, a distributed source, or examples not dense tensors.
        ValueError: for bad weights, policy or `shuffle_seed`, a global batch the replicas
            cannot share, too few files for `"file"`, a batched, infinite or empty source, a
            file pattern that matches nothing, or (for training) a strategy that would
            not update the weights within an epoch (`StrategyKind.check_epoch`).
    """
    request = _Request(source, strategy, global_batch_size, policy, weights, drop_remainder,
                       shuffle_seed, parse, training)
    plan = _make_plan(request)
    if training:
        kinds.kind_of(order.keras_strategy(strategy)).check_epoch(plan.steps,
                                                                  plan.global_batch_size)
    if request.adaptive is not None:
        # Where a TrainingMonitor finds the shares to steer (kind_of(...).adaptive_shares()).
        kinds.kind_of(order.keras_strategy(strategy)).hold_adaptive_shares(request.adaptive)
    return _distributed(request, plan)


def _distributed(request, plan, batch_map=None):
    """The request's data set for `plan`, with `batch_map` last in each replica's pipeline;
    marked, to be made again with another."""
    if batch_map is not None:
        request = copy.copy(request)
        request.batch_map = batch_map
    distributed = shard_pipeline.distribute(request, plan)
    if request.adaptive is not None:
        marks.mark_adaptive(distributed, request.adaptive)
    if batch_map is None:
        marks.mark_preprocessable(distributed, preprocessing.Preprocessable(
            functools.partial(_distributed, request, plan)))
    return marks.mark_sharded(distributed)
