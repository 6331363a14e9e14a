"""A step that leaves a replica without examples trains and validates as one device does."""

import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.data import order
from support import compare, tolerance, validation_problem


@pytest.fixture(autouse=True)
def _released():
    order.position_of(tf.distribute.get_strategy()).release()
    yield
    order.position_of(tf.distribute.get_strategy()).release()


def _relative(got, want):
    return abs(got - want) / abs(want)


@pytest.mark.parametrize("case, devices, steps_per_execution", [
    ("one example, 2 replicas", 2, 2), ("three examples, 4 replicas", 4, 1)])
def test_a_step_with_an_empty_replica_is_one_devices_step(case, devices, steps_per_execution):
    run = validation_problem.CASES[case]
    want = validation_problem.reference(run)
    got, _ = validation_problem.sharded(run, mgpu_tf.make_strategy("mirrored", devices=devices),
                                        steps_per_execution)
    bound = tolerance.training(run.steps, validation_problem.TERMS + run.batch)
    assert compare.relative_difference(got["weights"], want["weights"]) <= bound
    assert len(got["val_loss"]) == run.epochs
    for g, w in zip(got["val_loss"], want["val_loss"]):
        assert _relative(g, w) <= bound, (got["val_loss"], want["val_loss"])
    assert _relative(got["evaluate"], want["evaluate"]) <= bound
