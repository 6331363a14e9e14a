"""One object per strategy kind, which every layer asks instead of matching kind names.

`kind_of(strategy)` returns it: what `make_strategy` attached, or, for a strategy made
elsewhere, the registered kind whose classes it is an instance of.

Design: docs/design.md#the-strategy-factory
"""

import weakref

from mgpu_tf.base import registry

__all__ = ["StrategyKind", "OnePipelineKind", "kind_of", "kind_of_model", "attach",
           "attach_model", "with_companions"]

# Set with object.__setattr__ on the tf.distribute object.
_ATTRIBUTE = "_mgpu_tf_kind"


class StrategyKind:
    """What the toolkit asks of one strategy: its topology, the patches it needs, its hooks.

    The base answers from TensorFlow's own figures; each registered kind overrides what
    differs. `settings` are what `make_strategy` parsed (`None` for a strategy made elsewhere).
    """

    name = None
    provisional = False  # adopted before a registered kind claimed the strategy

    def __init__(self, strategy, settings=None, *, name=None):
        self.strategy = strategy
        self.settings = settings
        if name is not None:
            self.name = name
        # The tcp ring of mgpu_tf.comm.transport, made on first use.
        self.connection = None
        # What transport="auto" chose for its optimizers ("tensorflow" or "tcp"), once.
        self.transport = None
        # Averages a worker's packed step logs over the workers in place of a collective.
        self.log_mean = None
        # The workers' vote on the step a signal stops them at, carried in the step logs
        # (mgpu_tf.cluster.stop_vote): made by the kinds of several workers.
        self.stop_vote = None
        # Keeps `timeout_seconds` over a multi-worker fit's steps, made at the first fit
        # (mgpu_tf.cluster.step_watchdog.for_fit).
        self.watchdog = None
        # The data position the callbacks set and the input pipelines read (data.order).
        self.position = None
        # The adaptive shares of data sets sharded for it, oldest first, kept while their
        # data set lives (`adaptive_shares()`).
        self._adaptive = weakref.WeakKeyDictionary()
        # Records in the TFRecord files sharded for it, by (path, size, modification time).
        self.record_counts = {}
        # The sharding policies 'auto' chose for its data sets and logged: each shows once.
        self.logged_policies = set()

    def settle(self):
        """Readies what it keeps once `make_strategy` has given it its settings, outside any
        strategy's scope."""

    @classmethod
    def check_options(cls, values, given):
        """Raises `ValueError` for parsed option `values` (as `given`) this kind cannot use,
        before the strategy is built."""

    # ------------------------------------------------------------------ topology

    @property
    def num_replicas(self):
        """Replicas in sync over the whole cluster."""
        return int(self.strategy.num_replicas_in_sync)

    @property
    def worker_devices(self):
        """This process' devices, one per local replica."""
        return tuple(self.strategy.extended.worker_devices)

    @property
    def replicas_per_worker(self):
        """Replicas of each worker process."""
        return len(self.worker_devices)

    @property
    def num_workers(self):
        """Worker processes in the cluster."""
        return self.num_replicas // self.replicas_per_worker

    @property
    def is_chief(self):
        """True in the process that writes checkpoints and logs."""
        owner = getattr(self.strategy, "extended", self.strategy)
        return bool(getattr(owner, "should_checkpoint", True))

    @property
    def spans_processes(self):
        """True when its replicas in other processes are reached through its collectives."""
        return False

    @property
    def sums_in_optimizer(self):
        """True when the replicas' gradients are summed in the Keras optimizer's all-reduce."""
        return False

    def local_units(self):
        """`(units, replicas per unit, {this process' unit: its devices})`: what adaptive
        shares weigh."""
        return 1, 1, {0: [None]}

    def data_layout(self):
        """`(pipeline, workers, replicas per worker)` for `shard_dataset`: `pipeline` is
        `"default"`, `"mirrored"`, `"multi_worker"` or `"hybrid"`; `ValueError` for a kind
        it cannot feed."""
        raise ValueError(
            "shard_dataset works with the default, one_device, mirrored, multi_worker, "
            "model_parallel and hybrid strategies. Received: "
            f"strategy={type(self.strategy).__name__}. Use "
            "strategy.distribute_datasets_from_function() for this one.")

    def distribute_datasets(self, make_replica, make_worker):
        """What `model.fit` takes: `make_replica(pipeline)` or `make_worker(pipeline)` data
        sets, one per input pipeline of `data_layout()`."""
        return self.strategy.distribute_datasets_from_function(
            lambda context: make_worker(context.input_pipeline_id))

    def check_epoch(self, steps, global_batch_size):
        """Raises `ValueError` when training data of `steps` steps an epoch (of
        `global_batch_size`) would leave an epoch without an update under its options."""

    # ------------------------------------------------------------------ the seam

    @property
    def patches(self):
        """The names (of `mgpu_tf.compat.patches.PATCHES`) this kind needs installed."""
        return ("shuffle", "fit")

    def prepare_optimizer(self, optimizer):
        """Readies the optimizer of a model compiled under the strategy; returns it."""
        return optimizer

    def prepare_model(self, model):
        """Readies a Keras model built in the strategy's scope; returns the model to fit."""
        return model

    def prepare_compiled(self, model):
        """Readies a Keras model `compile` has just compiled under the strategy."""
        if model.optimizer is not None:
            self.prepare_optimizer(model.optimizer)

    # ------------------------------------------------------------------ adaptive shares

    def hold_adaptive_shares(self, shares):
        """Keeps the `mgpu_tf.data.adaptive.AdaptiveShares` of a data set sharded for it."""
        self._adaptive[shares] = None

    def adaptive_shares(self):
        """Its data sets' adaptive shares, oldest first: what a `TrainingMonitor` steers."""
        return list(self._adaptive)

    def fit_callbacks(self, callbacks):
        """The callbacks `fit` runs for the `callbacks` it was given: `with_companions`."""
        return with_companions(callbacks)

    def prepare_fit(self, data, callbacks, steps_per_execution=1, **fit):
        """Before `fit`'s first step: an adaptive `data` needs one of `callbacks` to steer it;
        a data set of `shard_dataset` learns that this fit trains from it, reading
        `steps_per_execution` steps per call (`mgpu_tf.data.stream`); a kind refuses here
        what it cannot fit (`fit`: `fit`'s `model` and `class_weight`)."""
        for shares in self.adaptive_shares():
            shares.check_fit(data, callbacks)
        stream = getattr(type(data), "epoch_stream", None)
        if stream is not None:
            stream.train(steps_per_execution)

    def finish_fit(self, data=None):
        """`fit` ended or failed: nothing decides shares any more, no pipeline waits, no
        fit trains from `data`, and no step is in flight for the watchdog."""
        if self.watchdog is not None:
            self.watchdog.ended()
        for shares in self.adaptive_shares():
            shares.release()
        stream = getattr(type(data), "epoch_stream", None)
        if stream is not None:
            stream.train(None)

    def __repr__(self):
        return f"{type(self).__name__}(name={self.name!r}, strategy={self.strategy!r})"


class OnePipelineKind(StrategyKind):
    """One copy of the model per process, fed whole batches by one input pipeline."""

    @property
    def replicas_per_worker(self):
        return 1

    def data_layout(self):
        return "default", 1, 1

    def distribute_datasets(self, make_replica, make_worker):
        return make_replica(0)


def attach(strategy, kind):
    """Makes `kind` what `kind_of(strategy)` returns; returns it."""
    object.__setattr__(strategy, _ATTRIBUTE, kind)
    return kind


def attach_model(model, kind):
    """Makes `kind` what `kind_of_model(model)` returns (`prepare_model` does); returns
    `model`."""
    object.__setattr__(model, _ATTRIBUTE, kind)
    return model


def kind_of_model(model):
    """The `StrategyKind` `model` was prepared for (`mgpu_tf.prepare_model`), else the kind
    of its `distribute_strategy`: a pipeline's model (`model_parallel`, `hybrid`) is built
    outside any `tf.distribute` scope, and Keras gives it TensorFlow's default strategy."""
    kind = getattr(model, _ATTRIBUTE, None)
    return kind if isinstance(kind, StrategyKind) else kind_of(model.distribute_strategy)


def kind_of(strategy):
    """The `StrategyKind` of a strategy object, adopted on first ask when made elsewhere.

    Example:

    ```python
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    assert mgpu_tf.kind_of(strategy).data_layout() == ("mirrored", 1, 2)
    ```

    Raises:
        TypeError: when `strategy` is not a strategy.
    """
    kind = getattr(strategy, _ATTRIBUTE, None)
    if isinstance(kind, StrategyKind) and not kind.provisional:
        return kind
    for name, entry in registry.entries().items():
        if entry.strategy_types and isinstance(strategy, entry.strategy_types):
            adopted = (entry.kind or StrategyKind)(strategy, name=name)
            if kind is not None:  # what was kept before its kind was registered
                adopted.__dict__.update({k: v for k, v in vars(kind).items()
                                         if k not in ("name", "provisional")})
            return attach(strategy, adopted)
    if kind is not None:
        return kind
    if _is_tf_strategy(strategy):
        # Kept until a registered kind claims it (its module imported), which takes its state.
        kind = StrategyKind(strategy, name=type(strategy).__name__)
        kind.provisional = True
        return attach(strategy, kind)
    raise TypeError(
        "`strategy` must be a strategy, such as mgpu_tf.make_strategy() returns. "
        f"Received: strategy={strategy!r}")


def _is_tf_strategy(strategy):
    import tensorflow as tf  # only for an unregistered strategy

    return isinstance(strategy, tf.distribute.Strategy)


def with_companions(callbacks):
    """`callbacks` (a list, tuple or None; a `CallbackList` runs as given) and after them
    what each asks `fit` to run beside it (its `fit_companions(callbacks)`)."""
    if not isinstance(callbacks, (list, tuple)):
        return callbacks
    extra = [c for callback in callbacks if hasattr(callback, "fit_companions")
             for c in callback.fit_companions(callbacks)]
    return [*callbacks, *extra] if extra else callbacks
