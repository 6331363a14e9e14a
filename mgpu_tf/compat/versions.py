"""Which releases each private Keras or TensorFlow name is known for, and what happens outside.

A release outside the tested ones is tried after one logged warning that names it and the
tested range; a name that is gone raises `PrivateNameError`.

Design: docs/design.md#private-names-and-versions
"""

import dataclasses
import logging
import re

__all__ = ["KNOWN", "Known", "PrivateNameError", "TRAINER_CLASS_NAMES", "attribute", "check",
           "describe", "known_for", "keras_mismatch", "log_once", "method", "missing",
           "refuse_below", "release_in", "tested_range", "trainer_class_name"]

logger = logging.getLogger("mgpu_tf")


class PrivateNameError(RuntimeError):
    """A private Keras or TensorFlow name mgpu_tf needs is missing from the installed release."""


@dataclasses.dataclass(frozen=True)
class Known:
    """The releases `first` to `last` of `library` that a private name is known for.

    `purpose` is what mgpu_tf does with it, as the start of a sentence.
    """

    library: str
    first: tuple
    last: tuple
    purpose: str

    def text(self):
        """The range as `Keras 3.8-3.16`."""
        return (f"{_LIBRARIES[self.library]} {self.first[0]}.{self.first[1]}-"
                f"{self.last[0]}.{self.last[1]}")

    def pin(self):
        """A pip requirement for the known releases, such as `keras>=3.8,<3.16`."""
        return (f"{self.library}>={self.first[0]}.{self.first[1]},"
                f"<{self.last[0]}.{self.last[1] + 1}")


_LIBRARIES = {"keras": "Keras", "tensorflow": "TensorFlow"}
_OWNERS = {"keras": "Keras'", "tensorflow": "TensorFlow's"}


def _keras(purpose, first=(3, 8), last=(3, 16)):
    return Known("keras", first, last, purpose)


def _tensorflow(purpose, first=(2, 18), last=(2, 22)):
    return Known("tensorflow", first, last, purpose)


_KERAS_20585 = "The fix for keras-team/keras#20585 patches Keras' trainer"
_STEPS_PER_SYNC = "gradient accumulation between syncs"
_SHARDED = "shard_optimizer_state updates each replica's slice of the variables"
_BACKUP = "callbacks.BackupAndRestore resumes fit at the backed-up epoch"
_STEP_FIX = ("The fix for steps_per_execution and jit_compile under tf.distribute replaces "
             "Keras' train and test functions")
_SCATTER = ("shard_optimizer_state reduce-scatters the gradients across workers with the "
            "strategy's own collective keys")
_KEYS = "Collectives of functions traced once reuse their instance keys"
_METRIC_SUMS = "The fix for Keras 3.8-3.9's metric sums under a strategy adds to variables"
_METRIC_READS = ("Metric reads and resets between steps under several workers keep their "
                 "collective keys")
_CHECKPOINT = ("shard_optimizer_state saves each slot whole in TensorFlow's checkpoints, "
               "whatever the replica count")
_TRAIN_STEP = ("The train step of HybridParallel, and of jit_compile under a strategy, "
               "follows Keras'")

# Keras' TensorFlow trainer class, `TensorFlowTrainer` in `KNOWN`'s names, by release: Keras
# 3.16 renames it `Trainer` (and its backend-independent base, `Trainer` in `KNOWN`, `BaseTrainer`).
TRAINER_CLASS_NAMES = {((3, 8), (3, 15)): "TensorFlowTrainer", ((3, 16), (3, 16)): "Trainer"}

# Private name -> the releases it is known for.
KNOWN = {
    "Sequential._functional": _keras("ModelParallel reads a Sequential model's layer graph"),
    "keras.src.models.functional.Functional": _keras("ModelParallel recognises a functional model"),
    "Functional._nodes_by_depth": _keras("ModelParallel orders a functional model's layers"),
    "Layer._flatten_layers": _keras("ModelParallel looks for batch-coupled layers"),
    "keras.src.backend.common.masking.get_keras_mask": _keras(
        "ModelParallel finds the Keras masks a cut would drop"),
    "Variable._initialize": _keras("ModelParallel moves each variable to its stage's device"),
    # Public methods, patched on the class: Keras calls them through each variable.
    "Variable.assign_add": _keras(_METRIC_SUMS),
    "Variable.assign_sub": _keras(_METRIC_SUMS),
    "Variable._value": _keras(_METRIC_SUMS),
    "BaseOptimizer._trainable_variables": _keras(_STEPS_PER_SYNC),
    "BaseOptimizer._get_variable_index": _keras(_STEPS_PER_SYNC),
    "BaseOptimizer._track_variable": _keras(
        "shard_optimizer_state lists its slots in optimizer.variables"),
    # Public methods that Keras calls through the optimizer instance, so that an
    # instance attribute takes their place: a calling convention, not an API.
    "BaseOptimizer.build": _keras(_STEPS_PER_SYNC),
    "BaseOptimizer.apply": _keras(_STEPS_PER_SYNC),
    "BaseOptimizer.update_step": _keras("ModelParallel runs each variable's update on its device"),
    "BaseOptimizer.add_variable_from_reference": _keras(
        "ModelParallel creates each optimizer slot on its variable's device"),
    "BaseOptimizer.save_own_variables": _keras(_SHARDED),
    "BaseOptimizer.load_own_variables": _keras(_SHARDED),
    "TFOptimizer._backend_update_step": _keras(_SHARDED),
    "BaseOptimizer._clip_gradients": _keras(
        "Clipping under a strategy of several replicas acts on the gradient summed over them"),
    "TFOptimizer._all_reduce_sum_gradients": _keras(
        "Compression, the tcp transport and the all-reduce benchmarks replace the "
        "gradients' all-reduce"),
    "keras.src.backend.tensorflow.trainer": _keras(_KERAS_20585),
    "TensorFlowTrainer._maybe_symbolic_build": _keras(_KERAS_20585),
    "trainer.reduce_per_replica": _keras(_KERAS_20585),
    "trainer._collective_all_reduce_multi_worker": _keras(_KERAS_20585),
    "Trainer._distribute_strategy": _keras(
        "The fixes for Keras under tf.distribute read the strategy a model was made under"),
    "TensorFlowTrainer._make_function": _keras(_STEP_FIX),
    "TensorFlowTrainer._autoconvert_optionals": _keras(_STEP_FIX, first=(3, 12)),
    # Public methods of Keras' TensorFlow trainer class, which Keras does not export:
    # the fix stands in for the first two, tells a model's own steps from the last
    # two, and checks the source of all four.
    "TensorFlowTrainer.make_train_function": _keras(_STEP_FIX),
    "TensorFlowTrainer.make_test_function": _keras(_STEP_FIX),
    "TensorFlowTrainer.make_predict_function": _keras(_STEP_FIX),
    "TensorFlowTrainer.train_step": _keras(_STEP_FIX),
    "TensorFlowTrainer.test_step": _keras(_STEP_FIX),
    "TensorFlowTrainer.fit": _keras(
        "fit checks that something steers an adaptive data set's shares, and releases them"),
    # Patched on the base class itself: Keras loads a model's compile config only when
    # the model's class has Trainer.compile, so a patch on a subclass would stop that.
    "Trainer.compile": _keras("Communication options reach the optimizer compile makes"),
    # Patched on the base class, where a model's own compute_loss reaches it through super().
    "Trainer.compute_loss": _keras("A model's own train_step logs compute_loss's loss as on "
                                   "one device"),
    # Patched on the base class, which Keras calls through each model between steps.
    "Trainer.get_metrics_result": _keras(_METRIC_READS),
    "Trainer.reset_metrics": _keras(_METRIC_READS),
    "keras.src.trainers.data_adapters.get_data_adapter": _keras(
        "fit leaves out its shuffle warning for data sets from shard_dataset"),
    "keras.src.trainers.data_adapters.is_tf_dataset": _keras(
        "fit takes data sets from distribute_datasets_from_function on Keras 3.8"),
    "keras.src.backend.tensorflow.random._cast_seed": _keras(
        "Each replica of a strategy draws its own random numbers (Dropout masks)"),
    "Trainer._loss_tracker": _keras(_TRAIN_STEP),
    "Trainer._compute_loss": _keras(_TRAIN_STEP),
    "Layer._call_has_training_arg": _keras(_TRAIN_STEP),
    "Layer._maybe_build": _keras("A model built at its first call inside strategy.run is built "
                                 "in the cross-replica scope"),
    "keras.src.losses.loss.unscale_loss_for_distribution": _keras(_TRAIN_STEP),
    # Keras' fit reads where to start after `on_train_begin`, where a backup is read.
    "Trainer._initial_epoch": _keras(_BACKUP),
    "DatasetV2._inputs": _tensorflow("shard_dataset looks for a batching step in a data set"),
    "Optional._element_spec": _tensorflow(_STEP_FIX),
    "Trackable._serialize_to_tensors": _tensorflow(_CHECKPOINT),
    "Trackable._restore_from_tensors": _tensorflow(_CHECKPOINT),
    "tensorflow.python.data.experimental.ops.global_shuffle_op._global_shuffle": _tensorflow(
        "shard_dataset shuffles a source it can read by index without a buffer"),
    "tensorflow.python.eager.context": _tensorflow("make_strategy sets heartbeat timeouts"),
    "tensorflow.python.eager.context.Context._initialized": _tensorflow(
        "make_strategy waits for a multi-worker cluster's peers before TensorFlow does"),
    "Context.abort_collective_ops": _tensorflow(
        "A multi-worker fit's step that waited timeout_seconds for a peer fails"),
    "Context.check_collective_ops_peer_health": _tensorflow(
        "A multi-worker fit's step that waited timeout_seconds names a peer that is gone"),
    "CollectiveAllReduceExtended.experimental_enable_get_next_as_optional": _tensorflow(
        "A multi-worker fit on shard_dataset's data sets skips the all-reduce of which "
        "workers still have data"),
    "MirroredStrategy._collective_key_base": _tensorflow(
        "make_strategy gives each MirroredStrategy its own collective keys"),
    "CollectiveAllReduceExtended._cross_device_ops": _tensorflow(_SCATTER),
    "CollectiveAllReduce._launchers": _tensorflow(_SCATTER),
    "CollectiveReplicaLauncher._group_key": _tensorflow(_SCATTER),
    "CollectiveReplicaLauncher._group_size": _tensorflow(_SCATTER),
    "CollectiveReplicaLauncher._device": _tensorflow(_SCATTER),
    "CollectiveReplicaLauncher._options": _tensorflow(_SCATTER),
    "CollectiveReplicaLauncher._next_instance_key": _tensorflow(_SCATTER),
    "CollectiveReplicaLauncher._get_ordering_token": _tensorflow(_SCATTER),
    "CollectiveReplicaLauncher._prefer_unique_instance_key": _tensorflow(_KEYS),
    "CollectiveReplicaLauncher._collective_keys": _tensorflow(_KEYS),
    "CollectiveKeys._instance_key_table": _tensorflow(_KEYS),
    "the strategy scope stack of each graph": _tensorflow(
        "strategy_kind recognises TensorFlow's default strategy"),
}

_warned = set()  # the libraries whose release has been reported as untested
_logged = set()


def _version(library):
    if library == "keras":
        import keras

        return keras.__version__
    import tensorflow as tf

    return tf.__version__


def known_for(name, version=None):
    """Returns True when `name` (a key of `KNOWN`) is known for the installed release or `version`.

    Raises `ValueError` for a name not in `KNOWN`, or a version not starting with `major.minor`.
    """
    if name not in KNOWN:
        raise ValueError(f"`name` must be one of {', '.join(sorted(KNOWN))}. "
                         f"Received: name={name!r}")
    known = KNOWN[name]
    version = _version(known.library) if version is None else str(version)
    return release_in(version, known.first, known.last)


def log_once(message):
    """Logs `message` at INFO on the "mgpu_tf" logger, the first time it is seen only."""
    if message not in _logged:
        _logged.add(message)
        logger.info("mgpu_tf: %s", message)


def keras_mismatch(keras_version, first, last):
    """Why a fix for Keras releases `first` to `last` does not apply to `keras_version`, or None."""
    import keras

    if not release_in(keras_version, first, last, argument="keras_version"):
        return (f"Keras {keras_version} is outside {first[0]}.{first[1]}-{last[0]}.{last[1]}, "
                "the versions it is for")
    if keras.backend.backend() != "tensorflow":
        return f"the Keras backend is {keras.backend.backend()!r}, not 'tensorflow'"
    return None


def release_in(version, first, last, *, argument="version"):
    """Returns True when `version` (`"3.15.1"`) is a release from `first` to `last` (`(3, 0)`).

    Raises `TypeError` for a version not a string, `ValueError` for one not starting with
    `major.minor`; `argument` is what the errors call it.
    """
    if not isinstance(version, str):
        raise TypeError(f"`{argument}` must be a string. Received: {argument}={version!r}")
    match = re.match(r"(\d+)\.(\d+)", version.strip())
    if match is None:
        raise ValueError(f"`{argument}` must start with major.minor, such as '3.15.1'. "
                         f"Received: {argument}={version!r}")
    return first <= (int(match[1]), int(match[2])) <= last


def refuse_below(library, first, capability):
    """Raises `ValueError` when the installed `library` is older than `first` (`(3, 10)`).

    For a capability that cannot work before that release; `capability` names it. Reads the
    version from the package's metadata, so TensorFlow does not load.
    """
    from mgpu_tf.compat import releases

    version = releases.installed_version(library)
    if version is None or not re.match(r"\d+\.\d+", version):
        return
    if release_in(version, (0, 0), (first[0], first[1] - 1)):
        raise ValueError(
            f"{capability} needs {_LIBRARIES[library]} {first[0]}.{first[1]} or later. "
            f"Received: {library}=={version}. "
            f"pip install '{library}>={first[0]}.{first[1]}', or leave it off.")


def tested_range(library):
    """The releases of `library` ("keras" or "tensorflow") its private names are known for,
    as `Keras 3.8-3.16`."""
    known = [k for k in KNOWN.values() if k.library == library]
    return Known(library, min(k.first for k in known), max(k.last for k in known), "").text()


def trainer_class_name(keras_version):
    """Keras' TensorFlow trainer class' name in `keras_version`; outside `TRAINER_CLASS_NAMES`
    the nearest release's."""
    for (first, last), name in TRAINER_CLASS_NAMES.items():
        if release_in(keras_version, first, last, argument="keras_version"):
            return name
    ranges = sorted(TRAINER_CLASS_NAMES)
    newer = release_in(keras_version, (ranges[-1][1][0], ranges[-1][1][1] + 1), (99, 0),
                       argument="keras_version")
    return TRAINER_CLASS_NAMES[ranges[-1] if newer else ranges[0]]


def check(name):
    """Logs one warning, the first time a private name of a release outside the ones it is
    known for is reached: the release and the tested range, once per library."""
    if known_for(name):
        return
    known = KNOWN[name]
    release = _version(known.library)
    if known.library in _warned:
        logger.debug("mgpu_tf: tries %s private `%s` on %s %s, known for %s.",
                     _OWNERS[known.library], name, _LIBRARIES[known.library], release,
                     known.text())
        return
    _warned.add(known.library)
    logger.warning(
        "mgpu_tf: %s %s is outside the releases mgpu_tf is tested with (%s), so the private "
        "%s names it uses are tried untested (docs/compatibility.md).",
        _LIBRARIES[known.library], release, tested_range(known.library),
        _LIBRARIES[known.library])


def missing(name, received):
    """The `PrivateNameError` for the private `name`, gone from the installed release."""
    known = KNOWN[name]
    return PrivateNameError(
        f"{known.purpose} through {_OWNERS[known.library]} private `{name}`, which "
        f"{_LIBRARIES[known.library]} {_version(known.library)} does not have "
        f"({known.text()} do). Received: {received}. "
        f"Install a release it is known for: pip install '{known.pin()}'.")


def attribute(owner, name, received):
    """Returns `owner`'s attribute for the private `name` (`"Owner.attribute"`).

    Outside the releases `name` is known for, `check` logs; `received` is what the
    error says was received, such as `"model=<Sequential 'm'>"`. Raises `PrivateNameError`
    when `owner` has none.
    """
    check(name)
    try:
        return getattr(owner, name.rpartition(".")[2])
    except AttributeError:
        raise missing(name, received) from None


def method(owner, name, received):
    """`attribute`, and a `PrivateNameError` too when what it finds cannot be called."""
    found = attribute(owner, name, received)
    if not callable(found):
        raise missing(name, received)
    return found


def describe(obj):
    """`<SGD 'SGD'>`: the type and, for a Keras object, its name."""
    name = getattr(obj, "name", None)
    kind = type(obj).__name__
    return f"<{kind} {name!r}>" if isinstance(name, str) else f"<{kind}>"
