"""steps_per_sync: k steps of local gradient sums per all-reduce and update.

The reference is plain Keras under the default strategy with no accumulation:
one update per k consecutive global batches taken together. Training with
`steps_per_sync=k` on the same examples must give the same weights, with one
optimizer update every k steps.
"""

import json
import re

import keras
import numpy as np
import pytest

import mgpu_tf
from support import mw_equivalence
from support import compare
from support import tolerance
from support import workers

GLOBAL_BATCH = 4
# 12 global batches; an update sums up to 4 of them.
TOLERANCE = tolerance.training(12, mw_equivalence.TERMS + 4 * GLOBAL_BATCH)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.RandomState(3)
    x = rng.normal(size=(6 * 2 * GLOBAL_BATCH, 5)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.5 * x[:, 1:2] * x[:, 2:3]).astype("float32")
    weights = [rng.normal(scale=0.5, size=w.shape).astype("float32")
               for w in mw_equivalence.build_model(None).get_weights()]
    return x, y, weights


def _reference(problem, steps_per_sync, momentum):
    """Plain Keras, default strategy: one step per steps_per_sync global batches."""
    x, y, weights = problem
    model = mw_equivalence.build_model(weights, momentum)
    model.fit(x, y, batch_size=GLOBAL_BATCH * steps_per_sync, epochs=1, shuffle=False,
              verbose=0)
    return model.get_weights()


@pytest.mark.parametrize("value", [0, -2])
def test_steps_per_sync_below_one_fails(value):
    with pytest.raises(ValueError, match="`steps_per_sync` must be at least 1"):
        mgpu_tf.make_strategy("mirrored", devices=2, steps_per_sync=value)


@pytest.mark.parametrize("value", ["2", 2.0, True])
def test_steps_per_sync_must_be_an_integer(value):
    with pytest.raises(TypeError, match="`steps_per_sync` must be an integer"):
        mgpu_tf.make_strategy("mirrored", devices=2, steps_per_sync=value)


def test_compile_refuses_keras_own_accumulation_under_mirrored():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        model = mw_equivalence.build_model(None)
        with pytest.raises(ValueError, match=re.escape(
                "gradient_accumulation_steps=2 is refused under strategy 'mirrored': Keras' "
                "accumulation updates in a `tf.cond` in replica context")):
            model.compile(optimizer=keras.optimizers.SGD(0.1, gradient_accumulation_steps=2),
                          loss="mse")


def test_steps_per_sync_does_not_apply_to_default():
    with pytest.raises(ValueError, match="`steps_per_sync` does not apply to strategy 'default'"):
        mgpu_tf.make_strategy("default", steps_per_sync=2)


def test_keras_own_accumulation_still_fails_under_mirrored(problem):
    """The gap accumulation fills: when this passes, Keras' option may serve instead."""
    x, y, weights = problem
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        model = mw_equivalence.build_model(weights)
    # Set after compile, which refuses it (comm/combinations.py), so that Keras' own runs.
    model.optimizer.gradient_accumulation_steps = 2
    with pytest.raises(Exception, match="merge_call"):
        model.fit(mw_equivalence.global_batches(x, y, GLOBAL_BATCH), epochs=1, shuffle=False,
                  verbose=0)


@pytest.mark.parametrize("devices, steps_per_sync, momentum", [
    (2, 2, 0.0), (2, 3, 0.9), (4, 2, 0.9), (1, 2, 0.0)])
def test_mirrored_matches_unaccumulated_update_on_same_examples(
        problem, devices, steps_per_sync, momentum):
    x, y, weights = problem
    strategy = mgpu_tf.make_strategy("mirrored", devices=devices, steps_per_sync=steps_per_sync)
    with strategy.scope():
        model = mgpu_tf.prepare_model(mw_equivalence.build_model(weights, momentum), strategy)
    history = model.fit(mw_equivalence.global_batches(x, y, GLOBAL_BATCH), epochs=1,
                        shuffle=False, verbose=0)
    steps = len(x) // GLOBAL_BATCH
    assert int(model.optimizer.iterations.numpy()) == steps // steps_per_sync
    assert np.isfinite(history.history["loss"][0])
    expected = _reference(problem, steps_per_sync, momentum)
    assert compare.relative_difference(model.get_weights(), expected) < TOLERANCE
    assert compare.relative_difference(model.get_weights(), weights) > 1e-3


def test_steps_per_sync_one_is_every_step(problem):
    x, y, weights = problem
    strategy = mgpu_tf.make_strategy("mirrored", devices=2, steps_per_sync=1)
    with strategy.scope():
        model = mw_equivalence.build_model(weights)
        assert mgpu_tf.prepare_model(model, strategy) is model
    model.fit(mw_equivalence.global_batches(x, y, GLOBAL_BATCH), epochs=1, shuffle=False, verbose=0)
    assert compare.relative_difference(model.get_weights(), _reference(problem, 1, 0.0)) < TOLERANCE


def test_accumulation_with_compression_keeps_the_update_count(problem):
    x, y, weights = problem
    strategy = mgpu_tf.make_strategy("mirrored", devices=2, steps_per_sync=2,
                                     compression="bfloat16")
    with strategy.scope():
        model = mgpu_tf.prepare_model(mw_equivalence.build_model(weights), strategy)
    model.fit(mw_equivalence.global_batches(x, y, GLOBAL_BATCH), epochs=1, shuffle=False, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == len(x) // GLOBAL_BATCH // 2
    # bfloat16 keeps 8 bits: the update is the accumulated one to within its rounding.
    assert compare.relative_difference(model.get_weights(), _reference(problem, 2, 0.0)) < 2e-2


@pytest.mark.multiworker
@pytest.mark.parametrize("transport", ["tensorflow", "tcp"])
def test_two_workers_match_unaccumulated_update_on_same_examples(problem, tmp_path, transport):
    x, y, weights = problem
    data = tmp_path / "data.npz"
    np.savez(data, x=x, y=y, global_batch=GLOBAL_BATCH,
             **{f"w{i}": w for i, w in enumerate(weights)})
    code, outputs = workers.run_workers(
        "-m", 2, "support.mw_communication", data, tmp_path,
        json.dumps({"steps_per_sync": 3, "transport": transport}))
    assert code == 0, f"A worker failed (exit {code}):\n{outputs.get(0, '')[-3000:]}"
    expected = _reference_sgd(problem, 3)
    for index in (0, 1):
        saved = tmp_path / f"worker{index}.npz"
        assert int(np.load(saved)["updates"]) == len(x) // GLOBAL_BATCH // 3
        trained = compare.saved_weights(saved)
        assert compare.relative_difference(trained, expected) < TOLERANCE, f"worker {index}"


def _reference_sgd(problem, steps_per_sync):
    """The reference with the worker script's optimizer (mw_equivalence: SGD 0.1)."""
    return _reference(problem, steps_per_sync, 0.0)
