"""The suite's tolerances let rounding pass and still fail on a wrong update.

Each bound of `support.tolerance` that a data-parallel test uses is checked here on
that test's problem, with single-device Keras: a run whose learning rate is 1% too
high, and a run missing one step, must both lie beyond it from the correct run.
(The model-parallel bounds are checked beside their tests.)
"""

import keras
import numpy as np
import pytest

import test_accumulation
import test_adaptive_shards
import test_equivalence
import test_hybrid
import test_keras_steps
import test_sharding
import test_sharding_workers
from support import adaptive_worker
from support import compare
from support import mw_equivalence
from support import mw_hybrid
from support import sharding_problem
from support import steps_job
from support import tolerance


def _train(build, x, y, steps, *, learning_rate_factor=1.0):
    """Weights after `steps` of plain Keras, each step one list of example indices."""
    model = build()
    model.optimizer.learning_rate.assign(
        float(model.optimizer.learning_rate.numpy()) * learning_rate_factor)
    for ids in steps:
        model.train_on_batch(x[ids], y[ids])
    return model.get_weights()


def _wrong_runs(build, x, y, steps):
    return {"learning rate 1% high": _train(build, x, y, steps, learning_rate_factor=1.01),
            "one step missing": _train(build, x, y, steps[:-1])}


def test_the_bound_follows_the_computation():
    u = tolerance.UNIT_ROUNDOFF["float32"]
    assert tolerance.training(1, 1) == pytest.approx(10 * u)  # 2 x lambda x u
    assert tolerance.training(4, 25) == pytest.approx(10 * u * 10)  # sqrt(steps x terms)
    assert tolerance.training(4, 25, optimizer="adam") == pytest.approx(2 * 100 * u)
    assert tolerance.training(4, 25, dtype="float64") == pytest.approx(100 * 2.0 ** -53)


@pytest.mark.parametrize("bound, steps, batch", [
    (test_equivalence.TOLERANCE, test_equivalence.STEPS, test_equivalence.GLOBAL_BATCH),
    (test_accumulation.TOLERANCE, 6, 2 * test_accumulation.GLOBAL_BATCH),
])
def test_equivalence_bounds_reject_a_wrong_update(bound, steps, batch):
    rng = np.random.RandomState(7)
    x = rng.normal(size=(steps * batch, 5)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.5 * x[:, 1:2] * x[:, 2:3]).astype("float32")
    weights = [rng.normal(scale=0.5, size=w.shape).astype("float32")
               for w in mw_equivalence.build_model(None).get_weights()]
    build = lambda: mw_equivalence.build_model(weights)  # noqa: E731
    blocks = sharding_problem.blocks(len(x), batch)
    correct = _train(build, x, y, blocks)
    assert tolerance.rejects(bound, correct, _wrong_runs(build, x, y, blocks),
                             compare.relative_difference) == []


@pytest.mark.parametrize("bound, examples, batch, epochs", [
    (test_sharding.TOLERANCE, 997, 12, 1),  # its longest fit
    (test_sharding_workers.TOLERANCE, 997, 12, 1),  # 112 steps: a looser bound
    (test_adaptive_shards.TOLERANCE, adaptive_worker.EXAMPLES, adaptive_worker.GLOBAL_BATCH,
     adaptive_worker.EPOCHS),
])
def test_sharding_bounds_reject_a_wrong_update(bound, examples, batch, epochs):
    x, y, weights = sharding_problem.problem(examples)
    build = lambda: sharding_problem.build_model(weights)  # noqa: E731
    blocks = sharding_problem.blocks(examples, batch) * epochs
    correct = _train(build, x, y, blocks)
    assert tolerance.rejects(bound, correct, _wrong_runs(build, x, y, blocks),
                             compare.relative_difference) == []


def test_a_bound_that_lets_a_wrong_update_pass_is_named():
    x, y, weights = sharding_problem.problem(24)
    build = lambda: sharding_problem.build_model(weights)  # noqa: E731
    blocks = sharding_problem.blocks(24, 12)
    correct = _train(build, x, y, blocks)
    assert tolerance.rejects(1.0, correct, _wrong_runs(build, x, y, blocks),
                             compare.relative_difference) == [
        "learning rate 1% high", "one step missing"]


def test_keras_steps_bound_rejects_a_wrong_update():
    x, y = steps_job.data()

    def build():
        model = steps_job.build_model()
        steps_job.compile_model(model, 1, False)
        return model

    blocks = sharding_problem.blocks(len(x), steps_job.GLOBAL_BATCH) * steps_job.EPOCHS
    correct = _train(build, x, y, blocks)
    assert tolerance.rejects(test_keras_steps.BOUND, correct, _wrong_runs(build, x, y, blocks),
                             compare.relative_difference) == []


def test_hybrid_bound_rejects_a_wrong_update():
    rng = np.random.RandomState(0)  # mw_hybrid's data
    x = rng.randn(mw_hybrid.EXAMPLES, 8).astype("float32")
    y = np.sin(x).sum(axis=1, keepdims=True).astype("float32")
    keras.utils.set_random_seed(100)
    initial = mw_hybrid.build_model().get_weights()

    def build():
        model = mw_hybrid.build_model()
        model.set_weights(initial)
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        return model

    blocks = sharding_problem.blocks(mw_hybrid.EXAMPLES, mw_hybrid.GLOBAL_BATCH) * mw_hybrid.EPOCHS
    correct = _train(build, x, y, blocks)
    assert tolerance.rejects(test_hybrid.TOLERANCE, correct, _wrong_runs(build, x, y, blocks),
                             compare.relative_difference) == []
