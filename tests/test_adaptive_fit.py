"""Adaptive shares and `fit`: refused before the first step when nothing steers them, and
no pipeline waiting for them once `fit` has ended or failed (2 mirrored replicas)."""

import threading
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from support import compare
from support import sharding_problem

REFUSAL = (r"weights='adaptive' needs mgpu_tf\.callbacks\.TrainingMonitor\(\) in fit's "
           r"callbacks\. Received: callbacks=")


def _adaptive(batch=24, examples=48):
    """(strategy, model, its initial weights, adaptive data, the data's shares)."""
    x, y, initial = sharding_problem.problem(examples, seed=7)
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        model = sharding_problem.build_model(initial)
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, batch,
                                 weights="adaptive")
    shares = mgpu_tf.kind_of(strategy).adaptive_shares()[-1]
    return strategy, model, initial, data, shares


@pytest.mark.parametrize("callbacks, received", [
    (None, r"\[\]$"),
    ("order", r"\[<mgpu_tf\.callbacks\.data_order\.DataOrder object"),
])
def test_fit_refuses_an_adaptive_data_set_that_nothing_steers_before_a_step(callbacks,
                                                                           received):
    _, model, initial, data, _ = _adaptive()
    given = [mgpu_tf.callbacks.DataOrder()] if callbacks == "order" else None
    with pytest.raises(ValueError, match=REFUSAL + received):
        model.fit(data, epochs=1, callbacks=given, verbose=0)
    # Not one step ran: the weights are those the model was built with.
    assert int(model.optimizer.iterations.numpy()) == 0
    for got, built in zip(model.get_weights(), initial):
        np.testing.assert_array_equal(got, built)


def test_a_plain_data_set_trains_without_a_monitor_beside_an_adaptive_one():
    strategy, model, initial, adaptive_data, _ = _adaptive()
    x, y, _ = sharding_problem.problem(48, seed=7)
    plain = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, 24)
    model.fit(plain, epochs=1, verbose=0)
    reference = sharding_problem.reference_weights(x, y, initial, sharding_problem.blocks(48, 24))
    assert compare.relative_difference(model.get_weights(), reference) < 1e-5
    assert adaptive_data is not None  # alive, so its shares are held beside


class _WaitsThenFails(keras.callbacks.Callback):
    """At the end of epoch 0, before the monitor decides, a reader of epoch 1's shares
    starts waiting; then the epoch fails."""

    def __init__(self, shares):
        super().__init__()
        self.shares, self.got, self.waiting = shares, [], None

    def read(self):
        self.got.append((self.shares.shares_for(1), time.monotonic()))

    def on_epoch_end(self, epoch, logs=None):
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()
        self.reader.join(0.5)
        self.waiting = self.reader.is_alive()
        raise RuntimeError("the epoch failed")


def test_a_failed_fit_releases_a_pipeline_waiting_for_the_next_shares():
    _, model, _, data, shares = _adaptive()
    failing = _WaitsThenFails(shares)
    monitor = mgpu_tf.callbacks.TrainingMonitor(print_table=False)
    with pytest.raises(RuntimeError, match="the epoch failed"):
        model.fit(data, epochs=3, callbacks=[failing, monitor], verbose=0)
    ended = time.monotonic()
    failing.reader.join(120.0)
    assert failing.waiting is True  # it waited for the decision while fit ran
    assert not failing.reader.is_alive()
    (got, returned), = failing.got
    # Released by the fit's end, not by the timeout; the latest shares (epoch 0's, even).
    assert returned - ended < 120.0  # the timeout is DECISION_TIMEOUT_SECONDS, 600 s
    assert got == (0.5, 0.5)


def test_after_a_fit_nothing_waits_for_shares():
    _, model, _, data, shares = _adaptive()
    model.fit(data, epochs=2, callbacks=[mgpu_tf.callbacks.TrainingMonitor(print_table=False)],
              verbose=0)
    latest = max(e for e in range(10) if shares.decided(e))
    started = time.monotonic()
    assert shares.shares_for(latest + 1) == shares.shares_for(latest, wait=False)
    assert time.monotonic() - started < 120.0  # a wait lasts DECISION_TIMEOUT_SECONDS, 600 s
