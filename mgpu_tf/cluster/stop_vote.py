"""The workers' agreement on the step a signal stops them at: each worker's vote travels in
the step logs every worker averages anyway, so every worker learns of a stop at one step.

Design: docs/reliability.md#sigterm-and-ctrl-c
"""

import tensorflow as tf

__all__ = ["StopVote"]


class StopVote:
    """One worker's vote to stop and the workers' mean of the votes, as two variables; every
    worker carries it, signalled or not, so their logs keep one shape."""

    def __init__(self):
        with tf.init_scope():
            self._mine = tf.Variable(0.0, trainable=False, name="mgpu_tf_stop_mine")
            self._agreed = tf.Variable(0.0, trainable=False, name="mgpu_tf_stop_agreed")
        self.carried = False  # a traced step carries the vote

    def carry(self, packed):
        """`packed` (a float32 vector of logs) with this worker's vote appended."""
        self.carried = True
        return tf.concat([packed, tf.reshape(self._mine.read_value(), [1])], 0)

    def keep(self, averaged):
        """`averaged` (the mean of carried vectors) without the vote, which it keeps."""
        with tf.control_dependencies([self._agreed.assign(averaged[-1])]):
            return tf.identity(averaged[:-1])

    def vote(self):
        """Votes to stop: the next step each worker runs carries it."""
        self._mine.assign(1.0)

    def agreed(self):
        """True once a step carried some worker's vote to stop (all workers read the same)."""
        return self.carried and float(self._agreed.numpy()) > 0.0
