"""Each replica's wait in the gradient all-reduce, timed inside the train step.

A step's compute is its time less that wait, so `TrainingMonitor` reads each unit's speed
from the steps it trains, with no pass of its own.

Design: docs/design.md#training-monitor
"""

import tensorflow as tf

from mgpu_tf.comm import optimizer_step

__all__ = ["WaitClock", "attach"]


class WaitClock:
    """Seconds and all-reduces of each local replica of `strategy` since the last `read`."""

    def __init__(self, strategy):
        self.strategy = strategy
        options = dict(trainable=False, synchronization=tf.VariableSynchronization.ON_READ,
                       aggregation=tf.VariableAggregation.SUM)
        with strategy.scope():
            self.seconds = tf.Variable(tf.constant(0.0, tf.float64), **options)
            self.count = tf.Variable(tf.constant(0, tf.int64), **options)

    def around(self, all_reduce, grads_and_vars):
        """`all_reduce(grads_and_vars)`, timed from the last local gradient to the last sum."""
        local = [g for g, _ in grads_and_vars if g is not None]
        with tf.control_dependencies(local):
            start = tf.timestamp()
        reduced = all_reduce(grads_and_vars)
        with tf.control_dependencies([g for g, _ in reduced if g is not None]):
            waited = tf.timestamp() - start
        # Stateful: a traced function runs them in order with the rest of the step.
        self.seconds.assign_add(waited)
        self.count.assign_add(1)
        return reduced

    def peek(self):
        """`[(seconds, all-reduces)]` of each local replica since the last read."""
        return [(float(seconds.numpy()), int(count.numpy())) for seconds, count in zip(
            self.strategy.experimental_local_results(self.seconds),
            self.strategy.experimental_local_results(self.count))]

    def read(self):
        """`peek()`, then the clock starts again from zero."""
        figures = self.peek()
        for variable in (self.seconds, self.count):
            for local in self.strategy.experimental_local_results(variable):
                local.assign(tf.zeros_like(local))
        return figures


def attach(optimizer, strategy):
    """The `WaitClock` of `optimizer`, made on first use; its train step, traced from now on,
    times its all-reduce."""
    record = optimizer_step.hook_of(optimizer)
    if record.wait_clock is None:
        record.wait_clock = WaitClock(strategy)
    return record.wait_clock
