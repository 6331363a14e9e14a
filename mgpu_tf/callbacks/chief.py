"""Keras callbacks and savers that write from the chief only, never half a file.

Design: docs/design.md#writing-from-the-chief
"""

import contextlib
import os
import shutil
import tempfile

import keras
import tensorflow as tf

from mgpu_tf.comm import accumulation
from mgpu_tf.strategies import kinds

__all__ = [
    "is_chief",
    "chief_path",
    "remove_path",
    "strategy_of",
    "save_model",
    "save_weights",
    "ModelCheckpoint",
    "TensorBoard",
]


def is_chief(strategy=None):
    """True in the process that writes checkpoints and logs.

    Example:

    ```python
    import mgpu_tf
    strategy = mgpu_tf.make_strategy("default")
    assert mgpu_tf.callbacks.is_chief(strategy)
    ```

    Args:
        strategy: the strategy to ask. Defaults to the current one.
    """
    return kinds.kind_of(strategy or tf.distribute.get_strategy()).is_chief


def strategy_of(model):
    """The strategy that knows whether this process writes `model`'s files."""
    return getattr(model, "communicator", None) or model.distribute_strategy


@contextlib.contextmanager
def chief_path(path, strategy=None):
    """Yields where this process should write `path`.

    Example:

    ```python
    with chief_path("out/model.keras", model.distribute_strategy) as target:
        model.save(target)
    ```
    """
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    if is_chief(strategy):
        os.makedirs(directory, exist_ok=True)
        temporary = os.path.join(directory, f".tmp-{os.getpid()}-{name}")
        try:
            yield temporary
            os.replace(temporary, path)
        finally:
            remove_path(temporary)
    else:
        scratch = tempfile.mkdtemp(prefix="mgpu_tf-worker-")
        try:
            yield os.path.join(scratch, name)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def remove_path(path):
    """Removes the file or the directory tree at `path`, if there is one."""
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


def save_model(model, filepath, **kwargs):
    """`model.save(filepath)` from the chief only, atomically."""
    with chief_path(filepath, strategy_of(model)) as target:
        model.save(target, **kwargs)


def save_weights(model, filepath, **kwargs):
    """`model.save_weights(filepath)` from the chief only, atomically."""
    with chief_path(filepath, strategy_of(model)) as target:
        model.save_weights(target, **kwargs)


class _ChiefWriter:
    """A model stand-in for Keras callbacks whose `save` and `save_weights` are ours."""

    def __init__(self, model):
        self._wrapped = model

    def __getattr__(self, name):
        return getattr(self._wrapped, name)

    def save(self, filepath, **kwargs):
        with accumulation.of_last_sync(self._wrapped.optimizer):
            save_model(self._wrapped, filepath, **kwargs)

    def save_weights(self, filepath, **kwargs):
        with accumulation.of_last_sync(self._wrapped.optimizer):
            save_weights(self._wrapped, filepath, **kwargs)


class _WorkerScratch:
    """Points a callback's output into a temporary directory on non-chief workers.

    Subclasses say which attribute holds the output path and how the scratch
    directory replaces it; the directory is removed when training ends.
    """

    _scratch = None

    def _redirect(self, scratch):
        raise NotImplementedError

    def set_model(self, model):
        if not is_chief(strategy_of(model)) and self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix="mgpu_tf-worker-")
            self._redirect(self._scratch)
        super().set_model(model)

    def on_train_end(self, logs=None):
        super().on_train_end(logs)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


class ModelCheckpoint(_WorkerScratch, keras.callbacks.ModelCheckpoint):
    """`keras.callbacks.ModelCheckpoint` with chief-only, atomic writes."""

    def _redirect(self, scratch):
        self.filepath = os.path.join(scratch, os.path.basename(self.filepath))

    def set_model(self, model):
        # Keras saves through the callback's `model.save` and `model.save_weights`.
        if not isinstance(model, _ChiefWriter):
            model = _ChiefWriter(model)
        super().set_model(model)


class TensorBoard(_WorkerScratch, keras.callbacks.TensorBoard):
    """`keras.callbacks.TensorBoard` whose logs come from the chief only.

    Other workers log into a temporary directory that is removed when training
    ends. Takes the same arguments as the Keras callback.
    """

    def _redirect(self, scratch):
        self.log_dir = scratch
