"""`HybridParallel`: a pipeline over this worker's devices, gradients averaged across workers.

Design: docs/design.md#hybrid-parallelism
"""

import tensorflow as tf

from mgpu_tf.base import kind as kind_lib
from mgpu_tf.compat import keras_steps, keras_train_step
from mgpu_tf.model_parallel import placement
from mgpu_tf.model_parallel import wrapper

__all__ = ["HybridParallel"]


class HybridParallel(wrapper.ModelParallel):
    """Model parallel inside a worker, data parallel across workers.

    Made by `mgpu_tf.prepare_model(model, strategy)` under `make_strategy("hybrid")`, as in
    docs/planner.md. Each worker feeds its share of the global batch
    (`mgpu_tf.shard_dataset` gives it); the update equals the single-device update on the
    global batch.

    Args:
        model: a built Keras model, as for `ModelParallel`.
        devices: this worker's devices, one per stage.
        communicator: the `MultiWorkerMirroredStrategy` that averages gradients.
        balance: as for `ModelParallel`. Defaults to `"params"`.
        microbatches: as for `ModelParallel`. Defaults to `1`.
        **kwargs: `recompute`, `deferred_batch_norm` and the rest, as for `ModelParallel`.
    """

    def __init__(self, model, devices, communicator, *, balance="params", microbatches=1,
                 **kwargs):
        super().__init__(model, devices, balance=balance, microbatches=microbatches,
                         name=kwargs.pop("name", f"hybrid_{model.name}"), **kwargs)
        self._communicator = communicator
        keras_train_step.require(self)
        # Its train step all-reduces, with no tf.distribute scope around it: Keras must run
        # it inline for steps_per_execution to work (see mgpu_tf.compat.keras_steps).
        keras_steps.use_inline_steps(self)
        # Floating weights only: integer state (such as a dropout layer's seed) stays per worker.
        weights = [w for w in self._model.weights if tf.as_dtype(w.dtype).is_floating]
        broadcast_weights(communicator, weights, self._stage_groups(weights))
        separate_seeds(self._model, communicator.cluster_resolver.task_id)

    @property
    def communicator(self):
        """The `MultiWorkerMirroredStrategy` that averages over the workers."""
        return self._communicator

    def _stage_groups(self, variables):
        """Splits `variables` by the stage that holds them: a list of index lists."""
        position = {device: k for k, device in enumerate(self._devices)}
        groups = [[] for _ in self._devices]
        for i, variable in enumerate(variables):
            groups[position.get(placement.device_of(variable), 0)].append(i)
        return groups

    def train_step(self, data):
        # Keras' TensorFlow train_step, with the gradients averaged over the workers.
        vote = kind_lib.kind_of_model(self).stop_vote

        def average(gradients, loss):
            return average_over_workers(self._communicator, gradients,
                                        self._stage_groups(self.trainable_weights), loss, vote)

        return keras_train_step.train_step(self, data, reduce=average)

    def test_step(self, data):
        # Keras' test step on this worker's batch, then each metric's state summed over the
        # workers, as tf.distribute's sum-on-read metric variables would be: one all-reduce.
        variables = [v for v in self.metrics_variables if tf.as_dtype(v.dtype).is_floating]
        before = [tf.identity(v.value) for v in variables]
        super().test_step(data)
        add_other_workers_changes(self._communicator, variables, before)
        return self.get_metrics_result()


def _local(communicator, value):
    return tf.nest.map_structure(
        lambda v: communicator.experimental_local_results(v)[0], value)


def _as_gradient(value):
    return value if isinstance(value, tf.IndexedSlices) else tf.convert_to_tensor(value)


def average_over_workers(communicator, gradients, groups, loss, vote=None):
    """Returns `(gradients, loss)` averaged over the workers, one all-reduce per stage; the
    loss and the stop `vote` (a `StopVote`, or None) travel with the last stage's."""

    def replica_fn(gradients, loss):
        context = tf.distribute.get_replica_context()
        out = list(gradients)
        for k, group in enumerate(groups):
            last = k == len(groups) - 1
            pack = [gradients[i] for i in group]
            if last:
                pack.append(loss)
                if vote is not None:
                    pack.append(vote.carry(tf.zeros([0])))
            # Copied to the replica's device: the collective reduces values of one device.
            pack = [tf.identity(value) for value in pack]
            reduced = list(context.all_reduce(tf.distribute.ReduceOp.MEAN, pack) if pack else [])
            if last and vote is not None:
                with tf.control_dependencies([vote.keep(reduced.pop())]):
                    reduced[-1] = tf.identity(reduced[-1])
            for i, value in zip(group, reduced):
                out[i] = value
            if last:
                loss = reduced[-1]
        return out, loss

    present = [i for i, g in enumerate(gradients) if g is not None]
    position = {i: n for n, i in enumerate(present)}
    groups = [[position[i] for i in group if i in position] for group in groups]
    # An Embedding's `tf.IndexedSlices` stays sparse: gathered, not summed densely, so the
    # clipping norms see the slices one device's Keras sees.
    out, loss = communicator.run(
        replica_fn, args=([_as_gradient(gradients[i]) for i in present], loss))
    out, loss = _local(communicator, (out, loss))
    averaged = list(gradients)
    for n, i in enumerate(present):
        averaged[i] = out[n]
    return averaged, loss


def separate_seeds(model, worker):
    """Gives worker `worker` random draws of its own (Dropout masks): folds its index into
    the seed of each of `model`'s seed generators.

    Every worker starts from the same seeds, and the pipeline's forward pass runs outside a
    replica context, where `compat.replica_seeds` folds in nothing: row i of every worker's
    batch would get one mask.
    """
    if worker == 0:
        return
    for variable in model.variables:  # seed generators' states are not weights
        if variable.path.endswith("seed_generator_state"):
            state = tf.convert_to_tensor(variable.value)
            folded = tf.random.experimental.stateless_fold_in(tf.cast(state, tf.int64), worker)
            variable.assign(tf.stack([tf.cast(folded[0], state.dtype), state[1]]))


def add_other_workers_changes(communicator, variables, before):
    """Adds to each variable what the other workers added to theirs since `before`.

    Metric states are sums, so every worker then holds the state of all workers' examples.
    """
    if not variables:
        return
    changes = [tf.reshape(tf.cast(v.value - b, tf.float32), [-1])
               for v, b in zip(variables, before)]
    sizes = [int(change.shape[0]) for change in changes]

    def replica_fn(packed):
        # Copied to the replica's device: the collective reduces values of one device.
        return tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.MEAN, tf.identity(packed))

    # A mean, times the workers: each worker's change counts once however many local
    # replicas the communicator has (one per GPU), all fed the same change.
    means = communicator.experimental_local_results(
        communicator.run(replica_fn, args=(tf.concat(changes, 0),)))
    total = means[0] * (communicator.num_replicas_in_sync // len(means))
    for variable, start, change in zip(variables, before, tf.split(total, sizes)):
        variable.assign(start + tf.cast(tf.reshape(change, start.shape), start.dtype))


def broadcast_weights(communicator, variables, groups):
    """Gives every worker the first replica's (worker 0's) values, one all-reduce per stage."""

    def replica_fn(values):
        context = tf.distribute.get_replica_context()
        first = tf.cast(tf.equal(context.replica_id_in_sync_group, 0), tf.float32)
        out = list(values)
        for group in groups:
            if group:
                reduced = context.all_reduce(
                    tf.distribute.ReduceOp.SUM,
                    [values[i] * tf.cast(first, values[i].dtype) for i in group])
                for i, value in zip(group, reduced):
                    out[i] = value
        return out

    values = [tf.convert_to_tensor(v.value) for v in variables]
    reduced = _local(communicator, tf.function(
        lambda v: communicator.run(replica_fn, args=(v,)))(values))
    for variable, value in zip(variables, reduced):
        with tf.device(placement.device_of(variable)):
            variable.assign(value)
