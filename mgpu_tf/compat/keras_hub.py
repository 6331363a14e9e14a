"""KerasHub's task models take data sets from `shard_dataset`, preprocessing inside them.

KerasHub's `PipelineModel` maps its preprocessing over a `tf.data.Dataset` and takes
anything else for arrays, so a distributed data set fails in `from_tensor_slices`. The hook
wraps the function its `fit`, `evaluate` and `predict` build their data with: a data set of
`shard_dataset` is made again with the preprocessing last in each replica's pipeline;
another distributed data set is refused, with the fix, by a task that preprocesses.

Design: docs/design.md#data-sharding
"""

import functools
import logging
import sys

from mgpu_tf.compat import versions

__all__ = ["PREPROCESSABLE_ATTRIBUTE", "install", "installed"]

logger = logging.getLogger("mgpu_tf")

# On a data set of shard_dataset: its `mgpu_tf.data.preprocessing.Preprocessable`.
PREPROCESSABLE_ATTRIBUTE = "_mgpu_tf_preprocessable"

_MODULE = "keras_hub.src.utils.pipeline_model"
# `keras_hub.src.utils.pipeline_model._build_dataset(x, y, sample_weight, batch_size,
# preprocess_samples)`: the data of PipelineModel's fit, evaluate and predict.
_NAME = "_build_dataset"
_KNOWN = ((0, 32), (0, 32))
_MARK = "_mgpu_tf_keras_hub_hook"


def _pipeline_module():
    """KerasHub's `pipeline_model` once KerasHub is imported, else `None` (never imported here)."""
    if "keras_hub" not in sys.modules:
        return None
    import importlib

    return importlib.import_module(_MODULE)


def installed():
    """True when KerasHub's task models build their data through the hook."""
    module = _pipeline_module()
    return module is not None and getattr(getattr(module, _NAME, None), _MARK, False)


def install():
    """Wraps KerasHub's `_build_dataset` once KerasHub is imported; again changes nothing."""
    module = _pipeline_module()
    if module is None:
        logger.debug("mgpu_tf: KerasHub is not imported; its task models are left as they are.")
        return
    if installed():
        return
    import keras_hub

    original = getattr(module, _NAME, None)
    if original is None:
        logger.warning(
            "mgpu_tf: keras-hub %s has no %s.%s, so its task models cannot take data sets "
            "of shard_dataset. Install keras-hub>=0.32 to feed them.", keras_hub.__version__,
            _MODULE, _NAME)
        return
    if not versions.release_in(keras_hub.__version__, *_KNOWN):
        logger.info("mgpu_tf: %s.%s is known for keras-hub 0.32; trying it with %s.",
                    _MODULE, _NAME, keras_hub.__version__)

    @functools.wraps(original)
    def build_dataset(x, y, sample_weight, batch_size, preprocess_samples):
        data = _sharded_or_distributed(x, y, sample_weight, batch_size, preprocess_samples)
        if data is not None:
            return data
        return original(x, y, sample_weight, batch_size, preprocess_samples)

    setattr(build_dataset, _MARK, True)
    setattr(module, _NAME, build_dataset)


def _preprocesses(preprocess_samples):
    """False for a task model with no preprocessor."""
    owner = getattr(preprocess_samples, "__self__", None)
    return not (hasattr(owner, "preprocessor") and owner.preprocessor is None)


def _sharded_or_distributed(x, y, sample_weight, batch_size, preprocess_samples):
    """The data for `x` from `shard_dataset` or distributed; `None` for any other `x`."""
    import tensorflow as tf

    preprocessable = getattr(x, PREPROCESSABLE_ATTRIBUTE, None)
    if preprocessable is None and not isinstance(x, tf.distribute.DistributedDataset):
        return None
    for name, value in (("y", y), ("sample_weight", sample_weight),
                        ("batch_size", batch_size)):
        if value is not None:
            raise ValueError(
                f"When `x` is a distributed data set, `{name}` must be None: the data set "
                f"holds its examples and batches. Received: {name}={type(value).__name__}. "
                "Give the labels in the data set's examples.")
    if not _preprocesses(preprocess_samples):
        return x
    if preprocessable is not None:
        return preprocessable.with_preprocessing(preprocess_samples)
    raise ValueError(
        "A KerasHub task model with a preprocessor preprocesses its data in each replica's "
        "input pipeline, which a distributed data set no longer has. Received: "
        f"x={type(x).__name__}. Pass mgpu_tf.shard_dataset(examples, strategy, batch_size) "
        "or a tf.data.Dataset of raw examples, or preprocess in the data set and set "
        "`task.preprocessor = None`.")
