"""Each replica's slice of the gradients, summed over the replicas, delivered to it alone.

TensorFlow's `CollectiveReduceScatterV2` has an NCCL implementation only; on one machine each
slice is reduced to its owner's device, across workers an all-to-all of the slices is summed.

Design: docs/concepts.md#optimizer-state-sharded-across-replicas
"""

import tensorflow as tf

from mgpu_tf.compat import private_collectives

__all__ = ["to_devices", "by_all_to_all"]


def to_devices(context, grads, layout, dtype):
    """Each slice reduced to the device of the replica that owns it (`batch_reduce_to`).

    For MirroredStrategy, whose cross-device ops reduce to any device. Call in replica
    context; returns the list of slices by replica number, a replica reads its own.
    """
    slices = [layout.take(grads, r, dtype) for r in range(layout.num_replicas)]

    def reduce(distribution, *per_replica):
        devices = distribution.extended.worker_devices
        reduced = distribution.extended.batch_reduce_to(
            tf.distribute.ReduceOp.SUM, list(zip(per_replica, devices)))
        return [distribution.experimental_local_results(v)[0] for v in reduced]

    return context.merge_call(reduce, args=tuple(slices))


def by_all_to_all(context, grads, layout, dtype):
    """Each replica sends slice `j` of its gradients to replica `j`, which sums what it gets.

    For MultiWorkerMirroredStrategy: a ring reduce-scatter's traffic, `(N - 1) / N` of the
    gradients out of each replica, through the strategy's own collective launchers. Call in
    replica context; returns the list of summed slices by local replica, in the order of
    `strategy.extended.worker_devices`.
    """
    flat = tf.concat([tf.reshape(tf.cast(g, dtype), [-1]) for g in grads]
                     + [tf.zeros([layout.padded - layout.total], dtype)], 0)
    rows = tf.reshape(flat, [layout.num_replicas, layout.slice_size])

    def exchange(distribution, per_replica):
        launchers = private_collectives.collective_launchers(distribution)
        values = distribution.experimental_local_results(per_replica)

        def launch():
            out = []
            for launcher, value in zip(launchers, values):
                with tf.device(private_collectives.device(launcher)):
                    received = private_collectives.all_to_all(launcher, value)
                    out.append(tf.reduce_sum(received, axis=0))
            return out

        # Eagerly, one device's collective would block before the next is launched.
        return tf.function(launch)() if tf.executing_eagerly() else launch()

    return context.merge_call(exchange, args=(rows,))
