"""A model's own train and test steps log the loss `compute_loss` gave them as on one device
under data parallelism, with the gradient unchanged; a loss they compute by hand stays theirs.
So do the steps of Keras' guide, which hand the loss to a `Mean` tracker."""

import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from support import compare, guide_steps, own_steps, tolerance, workers

_STEPS = own_steps.EPOCHS * 4
_BOUND = tolerance.training(_STEPS, own_steps.TERMS + own_steps.GLOBAL_BATCH)


def _batches():
    x, y = own_steps.data()
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(own_steps.GLOBAL_BATCH)


def _run(strategy):
    """`(fit's logs, evaluate's logs, weights)` of `own_steps.build()` under `strategy`."""
    with strategy.scope():
        model = own_steps.build()
    history = model.fit(_batches(), epochs=own_steps.EPOCHS, shuffle=False, verbose=0)
    evaluated = model.evaluate(_batches(), verbose=0, return_dict=True)
    return history.history, evaluated, model.get_weights()


@pytest.fixture(scope="module")
def one_device():
    return _run(tf.distribute.get_strategy())


@pytest.fixture(scope="module")
def mirrored():
    return _run(mgpu_tf.make_strategy("mirrored", devices=2))


def _fit_guide(kind, strategy):
    """`(fit's logs, weights)` of `guide_steps.build(kind)` under `strategy`."""
    x, y = guide_steps.data()
    with strategy.scope():
        model = guide_steps.build(kind)
    history = model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(guide_steps.GLOBAL_BATCH),
                        epochs=guide_steps.EPOCHS, shuffle=False, verbose=0)
    return history.history, model.get_weights()


@pytest.fixture(scope="module")
def guide_one_device():
    return {kind: _fit_guide(kind, tf.distribute.get_strategy()) for kind in guide_steps.KINDS}


def _close(got, expected):
    return abs(got - expected) <= _BOUND * abs(expected)


@pytest.mark.parametrize("name", ["loss", "hand_loss"])
def test_mirrored_fit_logs_the_one_device_loss(mirrored, one_device, name):
    got, expected = mirrored[0][name], one_device[0][name]
    assert all(_close(g, e) for g, e in zip(got, expected)), (got, expected)


@pytest.mark.parametrize("name", ["loss", "hand_loss"])
def test_mirrored_evaluate_logs_the_one_device_loss(mirrored, one_device, name):
    assert _close(mirrored[1][name], one_device[1][name]), (mirrored[1], one_device[1])


def test_mirrored_gradient_is_unchanged(mirrored, one_device):
    assert compare.relative_difference(mirrored[2], one_device[2]) <= _BOUND


@pytest.mark.filterwarnings("ignore:`model.compiled_loss\\(\\)` is deprecated")
@pytest.mark.parametrize("kind", sorted(guide_steps.KINDS))
def test_mirrored_guide_step_logs_the_one_device_loss(guide_one_device, kind):
    logs, weights = _fit_guide(kind, mgpu_tf.make_strategy("mirrored", devices=2))
    expected_logs, expected_weights = guide_one_device[kind]
    assert compare.relative_difference(weights, expected_weights) <= _BOUND
    assert logs.keys() == expected_logs.keys()
    for name, values in logs.items():
        assert all(_close(g, e) for g, e in zip(values, expected_logs[name])), (
            name, values, expected_logs[name])


def test_a_tracker_given_a_changed_loss_warns_once_with_the_fix():
    with pytest.warns(UserWarning, match="The metric 'loss' is updated with a value computed "
                      "from a loss Keras divided by the 2 replicas") as caught:
        _fit_guide("changed", mgpu_tf.make_strategy("mirrored", devices=2))
    assert "num_replicas_in_sync" in str(caught[0].message)


# ------------------------------------------------------------------ real workers


@pytest.fixture(scope="module")
def two_workers():
    """Runs support/mw_custom_step_loss.py as two workers once: (exit code, {index: lines})."""
    code, outputs = workers.run_workers("-m", 2, "support.mw_custom_step_loss")
    return code, {i: text.splitlines() for i, text in outputs.items()}


def _floats(lines, name):
    found = [line.split(": ", 1)[1] for line in lines if line.startswith(name + ": ")]
    assert found, f"no {name!r} in:\n" + "\n".join(lines)
    return np.array([float(v) for v in found[-1].split()])


@pytest.mark.multiworker
@pytest.mark.parametrize("name", ["loss", "hand_loss"])
def test_two_workers_log_the_one_device_loss(two_workers, one_device, name):
    code, outputs = two_workers
    assert code == 0, "\n".join(outputs.get(0, []))
    for lines in outputs.values():
        fitted, evaluated = _floats(lines, f"fit {name}"), _floats(lines, f"evaluate {name}")[0]
        assert all(_close(g, e) for g, e in zip(fitted, one_device[0][name])), (
            fitted, one_device[0][name])
        assert _close(evaluated, one_device[1][name]), (evaluated, one_device[1][name])


@pytest.mark.multiworker
def test_two_workers_gradient_is_unchanged(two_workers, one_device):
    _, outputs = two_workers
    expected = np.concatenate([w.ravel() for w in one_device[2]])
    for lines in outputs.values():
        assert compare.relative_difference([_floats(lines, "weights")], [expected]) <= _BOUND


@pytest.mark.multiworker
@pytest.mark.parametrize("kind", sorted(guide_steps.KINDS))
def test_two_workers_guide_step_logs_the_one_device_loss(two_workers, guide_one_device, kind):
    code, outputs = two_workers
    assert code == 0, "\n".join(outputs.get(0, []))
    expected = guide_one_device[kind][0]["loss"]
    for lines in outputs.values():
        fitted = _floats(lines, f"guide {kind} fit loss")
        assert all(_close(g, e) for g, e in zip(fitted, expected)), (fitted, expected)
