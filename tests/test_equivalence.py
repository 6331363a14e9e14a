"""Data-parallel training is single-device training: same global batches, same weights.

From the same initial weights, a few SGD steps of `model.fit` under mirrored (2
and 4 devices) and multi_worker (2 real workers) must give the weights plain
Keras gives under the default strategy on the same global batches. On a machine
with GPUs, mirrored over two real GPUs must give the weights of one GPU.
"""

import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from support import compare
from support import mw_equivalence
from support import tolerance
from support import workers

STEPS = 3
GLOBAL_BATCH = 8
TOLERANCE = tolerance.training(STEPS, mw_equivalence.TERMS + GLOBAL_BATCH)


@pytest.fixture(scope="module")
def problem():
    """Data of STEPS global batches and fixed initial weights."""
    rng = np.random.RandomState(7)
    x = rng.normal(size=(STEPS * GLOBAL_BATCH, 5)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.5 * x[:, 1:2] * x[:, 2:3]).astype("float32")
    shapes = [w.shape for w in mw_equivalence.build_model(None).get_weights()]
    weights = [rng.normal(scale=0.5, size=s).astype("float32") for s in shapes]
    return x, y, weights


@pytest.fixture(scope="module")
def reference(problem):
    """Weights after STEPS steps of plain Keras under the default strategy."""
    x, y, weights = problem
    model = mw_equivalence.build_model(weights)
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    trained = model.get_weights()
    assert compare.relative_difference(trained, weights) > 1e-3, "the reference did not train"
    return trained


@pytest.mark.parametrize("devices", [2, 4])
def test_mirrored_matches_default(problem, reference, devices):
    x, y, weights = problem
    strategy = mgpu_tf.make_strategy("mirrored", devices=devices)
    assert strategy.num_replicas_in_sync == devices
    with strategy.scope():
        model = mw_equivalence.build_model(weights)
    model.fit(mw_equivalence.global_batches(x, y, GLOBAL_BATCH), epochs=1, shuffle=False,
              verbose=0)
    assert compare.relative_difference(model.get_weights(), reference) < TOLERANCE


@pytest.fixture
def without_tf32():
    """Full float32 matrix products: TensorFloat-32 on recent GPUs rounds to 10 bits."""
    enabled = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    yield
    tf.config.experimental.enable_tensor_float_32_execution(enabled)


@pytest.mark.gpu(2)
@pytest.mark.parametrize("all_reduce", ["nccl", "hierarchical_copy"])
def test_mirrored_on_two_gpus_matches_one_gpu(problem, all_reduce, without_tf32):
    x, y, weights = problem
    one = mgpu_tf.make_strategy("one_device", devices=["GPU:0"])
    with one.scope():
        single = mw_equivalence.build_model(weights)
    single.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    strategy = mgpu_tf.make_strategy("mirrored", num_gpus=2, all_reduce=all_reduce)
    assert [d.split("device:")[-1] for d in strategy.extended.worker_devices] == [
        "GPU:0", "GPU:1"]
    with strategy.scope():
        model = mw_equivalence.build_model(weights)
    model.fit(mw_equivalence.global_batches(x, y, GLOBAL_BATCH), epochs=1, shuffle=False,
              verbose=0)
    assert compare.relative_difference(single.get_weights(), weights) > 1e-3
    assert compare.relative_difference(model.get_weights(), single.get_weights()) < TOLERANCE


@pytest.mark.multiworker
def test_multi_worker_matches_default(problem, reference, tmp_path):
    x, y, weights = problem
    data = tmp_path / "data.npz"
    np.savez(data, x=x, y=y, global_batch=GLOBAL_BATCH,
             **{f"w{i}": w for i, w in enumerate(weights)})
    code, outputs = workers.run_workers("-m", 2, "support.mw_equivalence", data, tmp_path)
    assert code == 0, f"A worker failed (exit {code}):\n{outputs.get(0, '')}"
    for index in (0, 1):
        assert f"worker {index} of 2 replicas: done" in outputs[index]
        trained = compare.saved_weights(tmp_path / f"worker{index}.npz")
        assert compare.relative_difference(trained, reference) < TOLERANCE, f"worker {index}"
