"""Validation during `fit` gives, every epoch, what one device without `steps_per_execution`
gives, with `DataOrder` and validation steps that no execution's steps divide."""

import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.data import order
from support import compare, mw_validation, tolerance, validation_problem, workers

CASE = validation_problem.CASES["validation"]
TOLERANCE = tolerance.training(CASE.steps, validation_problem.TERMS + CASE.batch)


@pytest.fixture(autouse=True)
def _released():
    # The default strategy is TensorFlow's singleton: its position outlives a test.
    order.position_of(tf.distribute.get_strategy()).release()
    yield
    order.position_of(tf.distribute.get_strategy()).release()


@pytest.fixture(scope="module")
def expected():
    return validation_problem.reference(CASE)


def _relative(got, want):
    return abs(got - want) / abs(want)


def _assert_matches(got, want):
    assert len(got["val_loss"]) == len(want["val_loss"]) == CASE.epochs, got["val_loss"]
    for epoch, (g, w) in enumerate(zip(got["val_loss"], want["val_loss"])):
        assert _relative(g, w) <= TOLERANCE, (epoch, got["val_loss"], want["val_loss"])
    assert _relative(got["evaluate"], want["evaluate"]) <= TOLERANCE
    assert compare.relative_difference(got["weights"], want["weights"]) <= TOLERANCE


@pytest.mark.parametrize("name, devices, steps_per_execution", [
    ("default", None, 2), ("default", None, 3), ("default", None, 4),
    ("mirrored", 2, 1), ("mirrored", 2, 4)])
def test_every_epochs_validation_is_one_devices(expected, name, devices, steps_per_execution):
    strategy = mgpu_tf.make_strategy(name, **({"devices": devices} if devices else {}))
    got, _ = validation_problem.sharded(CASE, strategy, steps_per_execution)
    _assert_matches(got, expected)


@pytest.mark.parametrize("steps_per_execution, streams", [(4, 1), (3, 0)])
def test_fit_streams_its_epochs_only_when_executions_end_with_them(steps_per_execution,
                                                                   streams):
    # 8 training steps an epoch: 4 steps per call end with each epoch, 3 run into the next.
    got, train = validation_problem.sharded(CASE, mgpu_tf.make_strategy("default"),
                                            steps_per_execution)
    assert type(train).epoch_stream.streams_made == streams
    assert len(got["val_loss"]) == CASE.epochs


# ------------------------------------------------------------------ real workers


@pytest.fixture(scope="module")
def worker_results():
    """Runs support/mw_validation.py as two workers once; returns (code, {case: results})."""
    code, outputs = workers.run_workers("-m", 2, "support.mw_validation")
    found = {}
    for line in outputs.get(0, "").splitlines():
        kind, _, rest = line.partition(" ")
        name, _, value = rest.partition(": ")
        if kind == "result":
            found[name] = validation_problem.from_json(value)
        elif kind == "error":
            found[name] = value
    return code, found, outputs


@pytest.mark.multiworker
@pytest.mark.parametrize("case", [name for name, _ in mw_validation.RUNS])
def test_two_workers_validate_as_one_device(worker_results, case):
    code, found, outputs = worker_results
    got = found.get(case)
    assert isinstance(got, dict), (got, code, outputs.get(0, "")[-3000:])
    want = validation_problem.reference(validation_problem.CASES[case])
    run = validation_problem.CASES[case]
    bound = tolerance.training(run.steps, validation_problem.TERMS + run.batch)
    assert len(got["val_loss"]) == run.epochs, got["val_loss"]
    for g, w in zip(got["val_loss"], want["val_loss"]):
        assert _relative(g, w) <= bound, (got["val_loss"], want["val_loss"])
    assert _relative(got["evaluate"], want["evaluate"]) <= bound
    assert compare.relative_difference(got["weights"], want["weights"]) <= bound
