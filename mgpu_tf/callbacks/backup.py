"""Backups that resume training exactly where it stopped, at an epoch or mid-epoch, on this
or another number of workers.

Design: docs/design.md#backup-and-restore
"""

import json
import logging
import os
import shutil
import sys
import time

import keras
import numpy as np

from mgpu_tf.callbacks import chief as chief_lib
from mgpu_tf.callbacks.data_order import DataOrder
from mgpu_tf.cluster import detect
from mgpu_tf.cluster import elastic
from mgpu_tf.comm import accumulation
from mgpu_tf.comm import prepare
from mgpu_tf.compat import private_callbacks
from mgpu_tf.strategies import kinds

__all__ = ["BackupAndRestore", "check_backup_dir"]

logger = logging.getLogger("mgpu_tf")


def _adaptive_shares(model):
    """The shares of the adaptive data sets of `model`'s strategy, which a backup keeps."""
    return kinds.kind_of_model(model).adaptive_shares()


class _ShortEpoch:
    """Ends a resumed epoch's steps, but not training (another callback may set `True`)."""

    def __bool__(self):
        return True


_SHORT_EPOCH = _ShortEpoch()

_METADATA = "training_metadata.json"
# Keras' SeedGenerator names its state variable so.
_RNG_SUFFIX = "seed_generator_state"


class BackupAndRestore(DataOrder):
    """Backs training up, from the chief only, and resumes from the backup exactly.

    Example:

    ```python
    import keras, numpy as np, tempfile
    import mgpu_tf
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    backup = mgpu_tf.callbacks.BackupAndRestore(tempfile.mkdtemp(), save_freq=2)
    model.fit(np.ones((32, 4)), np.ones((32, 1)), batch_size=8, epochs=2,
              callbacks=[backup], verbose=0)
    ```

    Args:
        backup_dir: where the backup lives.
        save_freq: `"epoch"`, or a number of steps between backups. Defaults to
            `"epoch"`.
        delete_checkpoint: remove the backup when training ends. Defaults to `True`.

    Raises:
        ValueError: for a `backup_dir` that is empty or cannot be a directory (a file, or
            a path under one), or a `save_freq` that is neither `"epoch"` nor a positive
            integer; as `fit` starts on the chief, for a `backup_dir` it cannot make.
    """

    def __init__(self, backup_dir, save_freq="epoch", delete_checkpoint=True):
        super().__init__()
        check_backup_dir(backup_dir)
        if save_freq != "epoch" and (isinstance(save_freq, bool)
                                     or not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(
                "`save_freq` must be 'epoch' or a positive number of steps. Received: "
                f"save_freq={save_freq!r}.")
        self.backup_dir = os.fspath(backup_dir)
        self.save_freq = save_freq
        self.delete_checkpoint = delete_checkpoint
        self._since_backup = 0
        self._owed = False
        self._epoch, self._offset, self._done = 0, 0, 0

    @property
    def resumed_steps(self):
        """The steps of the current epoch the backup it resumed from had run (0: none)."""
        return self._offset

    # ------------------------------------------------------------------ restore

    def set_model(self, model):
        super().set_model(model)
        # A Keras without the name stops here, not after the first backup.
        private_callbacks.require_initial_epoch(model)
        if chief_lib.is_chief(chief_lib.strategy_of(model)):  # the others write elsewhere
            _make_backup_dir(self.backup_dir)

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        self._since_backup, self._owed = 0, False
        path = os.path.join(self.backup_dir, _METADATA)
        if not os.path.exists(path):
            return
        with open(path) as f:
            metadata = json.load(f)
        self._check_steps(metadata)
        optimizer = self.model.optimizer
        if optimizer is not None and not optimizer.built:
            optimizer.build(self.model.trainable_variables)
        self.model.load_weights(os.path.join(self.backup_dir, metadata["weights"]))
        states = metadata["rng"]
        variables = _rng_variables(self.model)
        if len(states) != len(variables):
            raise ValueError(
                f"The backup in {self.backup_dir} holds {len(states)} random generator "
                f"state(s); the model has {len(variables)}. Resume with the model that "
                "wrote the backup, or remove the backup directory to start again.")
        for variable, state in zip(variables, states):
            variable.assign(np.asarray(state, dtype=variable.dtype))
        if optimizer is not None:
            accumulation.reset(optimizer)
        if self._same_world(metadata):
            for state, live in zip(metadata.get("adaptive", []), _adaptive_shares(self.model)):
                live.restore(state)
        for live in _adaptive_shares(self.model):
            live.start_at(metadata["epoch"])
        self._position().resume_at(metadata["epoch"], metadata["steps_done"])
        private_callbacks.set_initial_epoch(self.model, metadata["epoch"])

    def _check_steps(self, metadata):
        steps, before = (self.params or {}).get("steps"), metadata.get("steps_per_epoch")
        if steps and before and steps != before:
            raise ValueError(
                f"The backup in {self.backup_dir} was taken with {before} steps per epoch; "
                f"this fit has {steps}. Received: a data set of {steps} steps. Resuming on "
                "another number of workers keeps the global batch: pass the backup's "
                "global_batch_size and data, or remove the backup directory to start again.")

    def _same_world(self, metadata):
        """Checks a backup against this fit; says in one line what changed in the world.

        Another number of workers or replicas keeps the global batch (the same steps per
        epoch) and the order; adaptive shares then start again where the data set starts them.
        """
        then, now = metadata.get("world"), _world(self.model)
        if then is None or all(then.get(key) == value for key, value in now.items()):
            return True
        same = (then["workers"], then["replicas"]) == (now["workers"], now["replicas"])
        logger.info(
            "mgpu_tf: resuming the backup of epoch %d step %d, taken on %s, on %s%s; global "
            "batch and data order kept%s.", metadata["epoch"], metadata["steps_done"],
            _describe(then), _describe(now),
            "" if then["steps_per_sync"] == now["steps_per_sync"] else
            f" (steps_per_sync {then['steps_per_sync']} -> {now['steps_per_sync']})",
            "" if same or not _adaptive_shares(self.model) else
            "; adaptive shares start again from even or the deployment's weights")
        return same

    # ------------------------------------------------------------------- backup

    def on_epoch_begin(self, epoch, logs=None):
        super().on_epoch_begin(epoch, logs)
        # A resumed epoch starts where the backup was taken; Keras numbers its batches from 0.
        self._epoch, self._offset = epoch, self._position().current()[1]
        self._done = self._offset

    def on_train_batch_end(self, batch, logs=None):
        done = self._offset + batch + 1
        if self.save_freq != "epoch":
            self._since_backup += done - self._done
            if self._since_backup >= self.save_freq:
                self._since_backup, self._owed = 0, True
        self._done = done
        steps = (self.params or {}).get("steps")
        finished = bool(steps) and done >= steps
        if finished and self._offset:
            # A resumed epoch is short. Ending it here keeps Keras from asking for one
            # more step, whose failed read would still count an optimizer iteration;
            # `on_epoch_end` lets training go on.
            self.model.stop_training = _SHORT_EPOCH
        if self._owed and finished:
            self._backup(self._epoch + 1, 0)
        elif self._owed:
            self._backup(self._epoch, done)

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if self.model.stop_training is _SHORT_EPOCH:
            self.model.stop_training = False
        if self.save_freq == "epoch":
            self._owed = True
        if self._owed:
            self._backup(epoch + 1, 0)

    def fit_companions(self, callbacks):
        """What `fit` runs beside this backup: a progress bar that counts a resumed epoch's
        steps, unless `callbacks` has a `ProgbarLogger` of its own."""
        if any(isinstance(c, keras.callbacks.ProgbarLogger) for c in callbacks):
            return []
        return [_ResumedEpochBar(self)]

    def backup_now(self):
        """Writes the backup of the last finished step now (for a stop on SIGTERM); False
        between the sync points of `steps_per_sync`, where the last backup stays."""
        steps = (self.params or {}).get("steps")
        try:
            if steps and self._done >= steps:
                return self._backup(self._epoch + 1, 0)
            return self._backup(self._epoch, self._done)
        except elastic.RegroupExit:
            return True

    def _backup(self, epoch, steps_done):
        """Writes the backup now, or at the next sync point of `steps_per_sync`; returns
        True when it wrote."""
        optimizer = self.model.optimizer
        if optimizer is not None and accumulation.steps_since_sync(optimizer):
            return False
        self._owed = False
        model = self.model
        strategy = chief_lib.strategy_of(model)
        name = f"weights-{epoch}-{steps_done}.weights.h5"
        with chief_lib.chief_path(os.path.join(self.backup_dir, name), strategy) as target:
            model.save_weights(target, overwrite=True)
        metadata = {"epoch": epoch, "steps_done": steps_done, "weights": name,
                    "rng": [np.asarray(v).tolist() for v in _rng_variables(model)],
                    "adaptive": [shares.state() for shares in _adaptive_shares(model)],
                    "world": dict(_world(model), shares=[
                        list(shares.shares_for(epoch, wait=False))
                        for shares in _adaptive_shares(model)]),
                    "steps_per_epoch": (self.params or {}).get("steps")}
        with chief_lib.chief_path(os.path.join(self.backup_dir, _METADATA), strategy) as target:
            with open(target, "w") as f:
                json.dump(metadata, f)
        if chief_lib.is_chief(strategy):
            # Older backups, and the temporary files of a chief killed mid-write: only
            # the chief writes here, and this one's writes are done.
            for old in os.listdir(self.backup_dir):
                if (old.startswith("weights-") and old != name) or old.startswith(".tmp-"):
                    chief_lib.remove_path(os.path.join(self.backup_dir, old))
            _tell_launcher(epoch, steps_done, (self.params or {}).get("epochs"))
        return True

    def on_train_end(self, logs=None):
        super().on_train_end(logs)
        if self.delete_checkpoint and chief_lib.is_chief(chief_lib.strategy_of(self.model)):
            shutil.rmtree(self.backup_dir, ignore_errors=True)


def check_backup_dir(path):
    """Raises unless `path` is, or can be made, a directory: it is not a file, nor under one.

    The callback checks so when it is made, and the main job at its `--backup_dir` flag, so
    that such a path fails before training, not at the first backup.

    Raises:
        ValueError: for an empty path, or one that is, or lies under, a file.
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(
            "`backup_dir` must be a directory path. Received: "
            f"backup_dir={path!r}. Pass storage every worker can read.")
    path = os.fspath(path)
    existing = os.path.abspath(path)
    while not os.path.exists(existing):  # the deepest part that exists
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        where = ("is a file" if existing == os.path.abspath(path)
                 else f"lies under {existing!r}, a file")
        raise ValueError(
            f"`backup_dir` must be a directory that can be made, but it {where}. "
            f"Received: backup_dir={path!r}. Pass a directory path on storage every worker "
            "can read.")


def _make_backup_dir(path):
    """Makes the chief's backup directory as `fit` starts: one that cannot be fails now."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise ValueError(
            f"`backup_dir` cannot be made by this process: {error.strerror}. Received: "
            f"backup_dir={path!r}. Pass a directory path the chief can write, on storage "
            "every worker can read.") from None


def _world(model):
    """`{"workers", "replicas", "steps_per_sync"}` of the fit training `model`."""
    strategy = model.distribute_strategy
    replicas = strategy.num_replicas_in_sync
    try:
        local = len(strategy.extended.worker_devices)
    except (AttributeError, RuntimeError):  # the default strategy has no worker devices
        local = replicas
    return {"workers": max(1, replicas // max(1, local)), "replicas": replicas,
            "steps_per_sync": prepare.settings(strategy).get("steps_per_sync", 1)}


def _describe(world):
    workers, replicas = world["workers"], world["replicas"]
    return (f"{workers} worker{'s' * (workers != 1)} ({replicas} "
            f"replica{'s' * (replicas != 1)})")


def _tell_launcher(epoch, steps_done, epochs):
    """Tells an elastic launcher a backup is complete; leaves if it waits to regroup.

    Leaving at once, before another step, makes the backup the point where the group
    grows; the launcher then stops the other workers.
    """
    marker = detect.environ_value(elastic.BACKUP_MARKER_VARIABLE)
    if not marker:
        return
    with open(marker + ".tmp", "w") as f:
        f.write(f"{epoch} {steps_done} {epochs or 0} {time.time_ns()}\n")
    os.replace(marker + ".tmp", marker)
    if os.path.exists(marker + elastic.REGROUP_SUFFIX) and (not epochs or epoch < epochs):
        logger.info("mgpu_tf: leaving at the backup of epoch %d step %d: the elastic "
                    "launcher regroups here.", epoch, steps_done)
        # Keras ends `fit` on an exception without `on_train_end`: the backup stays.
        raise elastic.RegroupExit(epoch, steps_done)


def _rng_variables(model):
    """The state variables of the model's random generators, which weights files leave out."""
    return [v for v in model.variables if v.path.endswith(_RNG_SUFFIX)]


class _ResumedEpochBar(keras.callbacks.ProgbarLogger):
    """Keras' progress bar, over the steps a resumed epoch runs: 58/58 for a resume 36 steps
    into 94, where Keras' own bar ends at 94/94."""

    def __init__(self, backup):
        super().__init__()
        self._backup, self._steps = backup, None

    def set_params(self, params):
        super().set_params(params)
        self._steps = self.target

    def on_epoch_begin(self, epoch, logs=None):
        done = self._backup.resumed_steps  # set by the backup, which runs first
        self.target = self._steps - done if self._steps and done else self._steps
        super().on_epoch_begin(epoch, logs)
        if done and self.verbose:
            sys.stdout.write(f"resumed after step {done} of {self._steps}: "
                             f"{self.target} steps left\n")
            sys.stdout.flush()
