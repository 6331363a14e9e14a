"""Keras' speed switches under `tf.distribute`: `steps_per_execution` and `jit_compile`.

Keras' trainer fails under every strategy with either on (keras-team/keras#19005); this
traces a multi-step execution inline and XLA-compiles each replica's step.

Design: docs/design.md#keras-speed-switches
"""

import ast
import functools
import hashlib
import inspect
import logging
import numbers
import warnings

from mgpu_tf.compat import (batch_norm_stats, collective_keys, keras_train_step, metric_sums,
                            private, private_trainer, step_loss, versions)

__all__ = ["KERAS_STEP_VERSIONS", "apply_step_fixes", "check_jit_compile",
           "check_steps_per_execution", "known_fingerprints", "step_fixes_apply",
           "step_fixes_installed", "source_fingerprints", "use_inline_steps"]

logger = logging.getLogger("mgpu_tf")

# First and last Keras (major, minor) releases whose trainer code this replaces.
KERAS_STEP_VERSIONS = ((3, 8), (3, 16))

# The Keras methods the fix stands in for, as `source_fingerprints()` prints them, by the
# releases that have that code (3.12 added `_autoconvert_optionals` to the steps; 3.16 reads
# a step of `steps_per_execution=1` outside the traced loop, see `_make_function`); a test
# fails when the installed Keras differs.
_SINCE_3_12 = {"train_step": "5e61593806", "test_step": "f100ddb49f",
               "make_train_function": "901acf9e69", "make_test_function": "7137ef049d"}
KNOWN_FINGERPRINTS = {
    ((3, 8), (3, 11)): {"_make_function": "c514879165", "train_step": "8997eb9cb1",
                        "test_step": "5080354f69", "make_train_function": "901acf9e69",
                        "make_test_function": "7137ef049d"},
    ((3, 12), (3, 15)): {"_make_function": "7748c2074e", **_SINCE_3_12},
    ((3, 16), (3, 16)): {"_make_function": "459f193be1", **_SINCE_3_12},
}
_METHODS = ("_make_function", "train_step", "test_step", "make_train_function",
            "make_test_function")

_MARK = "_mgpu_tf_inline_steps"
# The Keras releases whose predict hands the XLA-compiled step itself to `strategy.run`.
_PREDICT_ACROSS_REPLICAS = ((3, 8), (3, 11))
_TRAINER = "TensorFlowTrainer"
_JIT_COMPILE = {"auto": "auto", "true": True, "false": False}


def check_jit_compile(value):
    """Returns `value` (`"auto"`, a bool, or its name in any case) as `model.compile` takes it.

    Raises `ValueError` for anything else.
    """
    key = str(value).strip().lower() if isinstance(value, (str, bool)) else None
    if key not in _JIT_COMPILE:
        raise ValueError("`jit_compile` must be one of auto, true, false. "
                         f"Received: jit_compile={value!r}")
    return _JIT_COMPILE[key]


def check_steps_per_execution(value):
    """Returns `value` as a positive integer: `TypeError` for no integer, `ValueError` below 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("`steps_per_execution` must be an integer. "
                        f"Received: steps_per_execution={value!r}")
    if value < 1:
        raise ValueError("`steps_per_execution` must be at least 1. "
                         f"Received: steps_per_execution={value!r}")
    return int(value)


def step_fixes_apply(keras_version):
    """Returns True when `keras_version` (such as `"3.15.1"`) is one the fix is for."""
    return versions.release_in(keras_version, *KERAS_STEP_VERSIONS, argument="keras_version")


def known_fingerprints(keras_version):
    """`source_fingerprints()` as the fix knows them for `keras_version`, or None outside them."""
    for (first, last), fingerprints in KNOWN_FINGERPRINTS.items():
        if versions.release_in(keras_version, first, last, argument="keras_version"):
            return fingerprints
    return None


def source_fingerprints():
    """`{method: short hash of its source}` for the Keras methods this module replaces."""
    out = {}
    for name in _METHODS:
        method = private_trainer.trainer_function(f"{_TRAINER}.{name}")
        tree = ast.parse(inspect.getsource(method).strip())
        out[name] = hashlib.sha256(ast.unparse(tree.body[0]).encode()).hexdigest()[:10]
    return out


def use_inline_steps(model):
    """Makes `model`'s train and test steps run inline, as under a strategy; returns `model`.

    For models whose own `train_step` all-reduces (the hybrid wrapper) outside any
    `tf.distribute` scope, so that `steps_per_execution` works for them too.
    """
    object.__setattr__(model, _MARK, True)
    return model


def apply_step_fixes(*, keras_version=None):
    """Makes `steps_per_execution` and `jit_compile` work under `tf.distribute` strategies.

    `make_strategy` calls it; calling it again changes nothing. Outside
    `KERAS_STEP_VERSIONS` (for `keras_version`, defaulting to `keras.__version__`), or on
    a trainer it was not written for, it logs why and skips. Returns True when the fix is
    in place, False when it skipped.
    """
    import keras

    keras_version = keras.__version__ if keras_version is None else keras_version
    reason = versions.keras_mismatch(keras_version, *KERAS_STEP_VERSIONS)
    if reason is None:
        try:
            originals = {kind: private_trainer.trainer_function(f"{_TRAINER}.make_{kind}_function")
                         for kind in ("train", "test")}
            if getattr(originals["train"], _MARK, False):
                return True
            if source_fingerprints() != known_fingerprints(keras_version):
                reason = "the installed Keras trainer is not the code the fix was written for"
        except private.PrivateNameError as error:
            reason = str(error)
    if reason:
        versions.log_once("not patching Keras for steps_per_execution and jit_compile under "
                          f"tf.distribute: {reason}. Under a strategy, compile with "
                          "steps_per_execution=1 and jit_compile=False.")
        return False
    for kind, original in originals.items():
        private_trainer.set_trainer_function(f"{_TRAINER}.make_{kind}_function",
                                             _dispatch(original, kind))
    if versions.release_in(keras_version, *_PREDICT_ACROSS_REPLICAS):
        predict = f"{_TRAINER}.make_predict_function"
        private_trainer.set_trainer_function(
            predict, _predict_without_xla(private_trainer.trainer_function(predict)))
    logger.debug(  # `mgpu-tf env` and `patches.installed()` list it
        "mgpu_tf: patched Keras %s so that steps_per_execution and jit_compile work under "
        "tf.distribute strategies (TensorFlowTrainer.make_train_function and "
        "make_test_function).", keras_version)
    return True


def _predict_without_xla(original):
    """Wraps `make_predict_function` to build predict without XLA under a strategy.

    Keras 3.8-3.11 hand the XLA-compiled step itself to `strategy.run`, which compiles one
    cluster across the replicas ("Trying to access resource .../replica_1/..."); 3.12 on
    hand it a Python function that calls it, and each replica compiles its own.
    """
    import keras

    @functools.wraps(original)
    def make_predict_function(self, force=False):
        if not (self.jit_compile is True and _wants_fix(self)):
            return original(self, force)
        versions.log_once(f"Keras {keras.__version__} compiles predict across the replicas "
                          "of a strategy, which XLA cannot place: predict runs without XLA "
                          "under a strategy; Keras 3.12 and later compile it.")
        self.jit_compile = False
        try:
            return original(self, force)
        finally:
            self.jit_compile = True

    return make_predict_function


def step_fixes_installed():
    """True when Keras' trainer runs the `steps_per_execution` and `jit_compile` fix."""
    try:
        return getattr(private_trainer.trainer_function(f"{_TRAINER}.make_train_function"),
                       _MARK, False)
    except private.PrivateNameError:
        return False


def _wants_fix(model):
    import tensorflow as tf

    if getattr(model, _MARK, False):
        return True
    strategy = private_trainer.model_strategy(model)
    if strategy is None and tf.distribute.has_strategy():
        strategy = tf.distribute.get_strategy()
    return strategy is not None and not isinstance(strategy, tf.distribute.TPUStrategy)


def _dispatch(original, kind):
    @functools.wraps(original)  # `source_fingerprints` reads the original through it
    def make_function(self, force=False):
        if not _wants_fix(self):
            return original(self, force)
        attribute = f"{kind}_function"
        if getattr(self, attribute) is not None and not force:
            return getattr(self, attribute)
        step = self.train_step if kind == "train" else self.test_step
        if kind == "train" and (self.jit_compile is True or self.steps_per_execution > 1):
            # The one change a user sees: switches Keras refuses under a strategy run.
            versions.log_once(
                f"steps_per_execution={self.steps_per_execution} and "
                f"jit_compile={self.jit_compile} run under the strategy through mgpu_tf's "
                "train step (Keras' own fails there: keras-team/keras#19005).")
        setattr(self, attribute, _make_function(self, step, kind))
        return getattr(self, attribute)

    setattr(make_function, _MARK, True)
    return make_function


def _overrides(model, name):
    return getattr(type(model), name) is not private_trainer.trainer_function(f"{_TRAINER}.{name}")


def _replica_step(model, step_function, kind):
    """The function `strategy.run` calls: XLA-compiled per replica when `jit_compile`."""
    import keras
    import tensorflow as tf

    if not model.jit_compile or model.run_eagerly:
        return step_function
    if kind == "test":
        if metric_sums.metric_sum_fix_applies(keras.__version__):
            # Its metrics sum over the replicas as they update, which XLA cannot compile.
            versions.log_once(
                f"Keras {keras.__version__}'s metrics sum over the replicas in each step, so "
                "evaluate runs without XLA under a strategy; Keras 3.10 and later compile it.")
            return step_function
        return tf.function(tf.autograph.experimental.do_not_convert(step_function),
                           jit_compile=True, reduce_retracing=True)
    if _overrides(model, "train_step"):
        warnings.warn(
            f"{type(model).__name__} has its own train_step, which cannot be split for XLA "
            "under a distribution strategy (its optimizer update all-reduces): it runs "
            "without XLA. Compile with jit_compile=False to silence this.", stacklevel=3)
        return step_function
    return _xla_train_step(model)


def _xla_train_step(model):
    """Keras' `train_step`, with the forward pass, loss and gradients under XLA."""
    import tensorflow as tf

    keras_train_step.require(model)

    @tf.function(jit_compile=True, reduce_retracing=True)
    @tf.autograph.experimental.do_not_convert
    def forward(x, y, sample_weight):
        return keras_train_step.forward_backward(model, x, y, sample_weight)

    def train_step(data):
        return keras_train_step.train_step(model, data, forward=forward)

    return train_step


def _make_function(model, step_function, kind):
    """Keras' `_make_function`, with the distributed step traced inline (see above)."""
    import tensorflow as tf

    strategy = model.distribute_strategy
    across_workers = private_trainer.is_multi_worker(strategy)
    if _overrides(model, f"{kind}_step"):
        step_function = step_loss.logged_as_one_device(model, step_function)
    step = _replica_step(model, step_function, kind)
    if kind == "train":
        step = batch_norm_stats.averaged_after_step(model, step)
    step = private_trainer.autoconvert_optionals(model, step)
    # As in Keras' own step functions: no AutoGraph, whose conversion of every Python function
    # the step calls costs seconds per trace and changes nothing here.
    no_autograph = tf.autograph.experimental.do_not_convert

    @no_autograph
    def replica_step(data):
        # A Python function: strategy.run compiles an XLA function it is given across the
        # replicas ("Trying to access resource .../replica_1/..."), not in each.
        return step(data)
    reduce_per_replica = private_trainer.trainer_function("reduce_per_replica")

    @no_autograph
    def one_step_on_data(data):
        outputs = strategy.run(replica_step, args=(data,))
        if across_workers:  # averaged over the workers once per execution, below
            return _mean_of_local_replicas(outputs, strategy)
        return reduce_per_replica(outputs, strategy, reduction="auto")

    @no_autograph
    def multi_step_on_iterator(iterator):
        # Keras 3.16 reads this step's data eagerly; here it stays in one traced function on
        # every release, whose collectives (the data check across workers) keep their keys.
        if model.steps_per_execution == 1:
            return tf.experimental.Optional.from_value(one_step_on_data(iterator.get_next()))
        empty_outputs = tf.experimental.Optional.empty(None)

        def cond(step, outputs, next_inputs):
            return tf.logical_and(tf.less(step, model.steps_per_execution),
                                  next_inputs.has_value())

        def inner_body(step, outputs, next_inputs):
            def has_next():
                new = tf.experimental.Optional.from_value(
                    one_step_on_data(next_inputs.get_value()))
                private.set_optional_spec(empty_outputs, new.element_spec)
                return new

            def no_has_next():
                private.set_optional_spec(outputs, empty_outputs.element_spec)
                return outputs

            new_outputs = tf.cond(cond(step, outputs, next_inputs), has_next, no_has_next)
            next_inputs = tf.cond(tf.less(step + 1, model.steps_per_execution),
                                  iterator.get_next_as_optional, lambda: next_inputs)
            return step + 1, new_outputs, next_inputs

        def body(*loop_vars):
            for _ in range(min(model.unrolled_steps_per_execution,
                               model.steps_per_execution)):
                loop_vars = inner_body(*loop_vars)
            return loop_vars

        _, outputs, _ = tf.while_loop(
            cond, body,
            loop_vars=[tf.constant(0), empty_outputs, iterator.get_next_as_optional()])
        private.set_optional_spec(outputs, empty_outputs.element_spec)
        return outputs

    one_step = one_step_on_data
    mean_over_workers = None
    if not model.run_eagerly:  # one process' replicas trace together: keys kept
        keep = functools.partial(collective_keys.keeping_keys_in_one_process, strategy=strategy)
        multi_step_on_iterator = tf.function(keep(multi_step_on_iterator), reduce_retracing=True)
        one_step = tf.function(keep(one_step_on_data), reduce_retracing=True)  # *_on_batch
    if across_workers:
        mean_over_workers = no_autograph(lambda logs: _mean_over_workers(logs, strategy))
        if not model.run_eagerly:  # called every step: its collectives keep their keys
            mean_over_workers = tf.function(
                no_autograph(collective_keys.keeping_keys(mean_over_workers, strategy)))

    def function(iterator):
        if isinstance(iterator, (tf.data.Iterator, tf.distribute.DistributedIterator)):
            optional = multi_step_on_iterator(iterator)
            if not optional.has_value():
                raise StopIteration
            outputs = optional.get_value()
        else:
            for _, data in zip(range(model.steps_per_execution), iterator):
                outputs = one_step(data)
        return mean_over_workers(outputs) if mean_over_workers else outputs

    return function


def _mean_of_local_replicas(values, strategy):
    """The mean of each log over this worker's replicas, with no communication."""
    import tensorflow as tf

    def local_mean(value):
        parts = strategy.experimental_local_results(value)
        if len(parts) == 1 or not parts[0].dtype.is_floating:
            return parts[0]
        return tf.add_n(list(parts)) / len(parts)

    return tf.nest.map_structure(local_mean, values)


def _mean_over_workers(logs, strategy):
    """Averages the floating-point logs over the workers in one all-reduce."""
    import tensorflow as tf

    from mgpu_tf.compat import multi_worker

    flat = tf.nest.flatten(logs)
    floats = multi_worker.float_positions(flat)
    if not floats:
        return logs
    packed = multi_worker.pack_logs([flat[i] for i in floats], strategy)
    mean = multi_worker.log_mean_function(strategy)
    if mean is not None:
        averaged = mean(packed)
    else:
        def replica_mean(vector):
            # Copied to the replica's device: a collective reduces values of one device.
            return tf.distribute.get_replica_context().all_reduce("MEAN", tf.identity(vector))

        averaged = strategy.experimental_local_results(
            strategy.run(replica_mean, args=(packed,)))[0]
    out = list(flat)
    averaged = multi_worker.unpack_logs(averaged, [flat[i] for i in floats], strategy)
    for i, piece in zip(floats, averaged):
        out[i] = piece
    return tf.nest.pack_sequence_as(logs, out)
