"""Ray Train: Keras `fit` on the workers of a `TensorflowTrainer`, reported to Ray.

`make_strategy("auto")` inside `train_loop_per_worker` trains under Ray's chief-less TF_CONFIG
(ray-project/ray#47464, keras-team/keras#20585); `RayReporter` reports to Ray with the chief
alone writing the checkpoint.

Design: docs/design.md#ray-train
"""

import os
import shutil
import tempfile

import keras

from mgpu_tf.base import kind as kind_lib

__all__ = ["RayReporter"]

_SUFFIXES = (".keras", ".weights.h5")


def _ray_train():
    try:
        import ray.train
    except ImportError as error:
        raise ImportError("RayReporter reports to Ray Train, which is not installed. "
                          "Install it with: pip install 'ray[train]'") from error
    return ray.train


def _strategy_chief(model):
    """The strategy's answer to "does this process write?", as `mgpu_tf.callbacks.is_chief`."""
    strategy = getattr(model, "communicator", None) or model.distribute_strategy
    return kind_lib.kind_of(strategy).is_chief


class RayReporter(keras.callbacks.Callback):
    """Reports each epoch's logs to Ray Train, with the chief's model as the checkpoint.

    docs/deployment.md has a whole Ray Train script.

    Args:
        checkpoint: report a checkpoint with the metrics. Defaults to `True`.
        filename: the file in the checkpoint directory: a `.keras` name saves the whole
            model, a `.weights.h5` name its weights. Defaults to `"model.keras"`.

    Raises:
        TypeError: when `checkpoint` is not a bool.
        ValueError: for another `filename`, and, when training starts, for a model whose
            strategy does not span Ray's workers (its chief is not world rank 0).
        ImportError: when Ray Train is not installed.
    """

    def __init__(self, *, checkpoint=True, filename="model.keras"):
        super().__init__()
        if not isinstance(checkpoint, bool):
            raise TypeError(f"`checkpoint` must be True or False. "
                            f"Received: checkpoint={checkpoint!r}")
        if (not isinstance(filename, str) or not filename.endswith(_SUFFIXES)
                or os.path.basename(filename) != filename):
            raise ValueError(
                "`filename` must be a file name ending in .keras (the model) or "
                f".weights.h5 (its weights), without a directory. Received: "
                f"filename={filename!r}. Use 'model.keras'.")
        self._checkpoint = checkpoint
        self._filename = filename
        self._train = _ray_train()
        self._chief = None

    def on_train_begin(self, logs=None):
        context = self._train.get_context()
        rank, size = context.get_world_rank(), context.get_world_size()
        chief = _strategy_chief(self.model)
        if chief != (rank == 0):
            strategy = type(self.model.distribute_strategy).__name__
            raise ValueError(
                f"The model's strategy must span Ray's {size} workers, with world rank 0 "
                f"as its chief. Received: a {strategy} on which world rank {rank} is "
                f"{'the' if chief else 'not the'} chief. Build the model under "
                "mgpu_tf.make_strategy('auto') inside train_loop_per_worker: it reads "
                "the TF_CONFIG Ray sets.")
        self._chief = chief

    def on_epoch_end(self, epoch, logs=None):
        metrics = {name: float(value) for name, value in (logs or {}).items()}
        if not self._checkpoint:
            self._train.report(metrics)
            return
        directory = tempfile.mkdtemp(prefix="mgpu_tf-ray-")
        try:
            path = os.path.join(directory, self._filename)
            if self._filename.endswith(".keras"):
                self.model.save(path)
            else:
                self.model.save_weights(path)
            checkpoint = self._train.Checkpoint.from_directory(directory) if self._chief else None
            self._train.report(metrics, checkpoint=checkpoint)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
