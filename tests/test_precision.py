"""precision: Keras' mixed-precision policy chosen with the strategy, trained under each."""

import keras
import numpy as np
import pytest
from absl import flags

import mgpu_tf
from mgpu_tf import flags as mgpu_flags
from mgpu_tf.base import precision
from support import main_job
from support import workers

COMPUTE_DTYPE = {"float32": "float32", "mixed_float16": "float16",
                 "mixed_bfloat16": "bfloat16"}


@pytest.fixture(autouse=True)
def restore_policy():
    """Puts Keras' global dtype policy back after each test."""
    saved = keras.mixed_precision.dtype_policy()
    yield
    keras.mixed_precision.set_dtype_policy(saved)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.RandomState(5)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x[:, :1] - 0.5 * x[:, 1:2]).astype("float32")
    return x, y


def _fit(strategy, x, y, epochs=4):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="tanh"),
                                  keras.layers.Dense(1, dtype="float32")])
        model = mgpu_tf.prepare_model(model, strategy)
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    history = model.fit(x, y, batch_size=32, epochs=epochs, shuffle=False, verbose=0)
    return model, history.history["loss"]


@pytest.mark.parametrize("value", ["float16", "bf16", "mixed", 16])
def test_bad_precision_fails_with_the_choices(value):
    with pytest.raises(ValueError, match="`precision` must be one of float32, mixed_float16, "
                                         "mixed_bfloat16"):
        mgpu_tf.make_strategy("default", precision=value)


def test_a_bare_16_bit_dtype_gets_a_hint():
    with pytest.raises(ValueError, match=r"Received: precision='float16'\. Use 'mixed_float16'"):
        precision.check_precision("float16")


def test_bad_precision_flag_fails_at_parse_time():
    values = flags.FlagValues()
    mgpu_flags.define_flags(values)
    with pytest.raises(flags.IllegalFlagValueError, match="`precision` must be one of"):
        values(["prog", "--strategy=mirrored", "--precision=half"])


def test_precision_flag_becomes_the_option():
    values = flags.FlagValues()
    mgpu_flags.define_flags(values)
    values(["prog", "--strategy=mirrored", "--precision=mixed_bfloat16",
            "--compression=bfloat16", "--steps_per_sync=2"])
    assert mgpu_flags.strategy_options(values) == (
        "mirrored", {"precision": "mixed_bfloat16", "compression": "bfloat16",
                     "steps_per_sync": 2})


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("kind, options", [
    ("default", {}), ("one_device", {}), ("mirrored", {"devices": 2}),
    ("mirrored", {"devices": 2, "compression": "float16", "steps_per_sync": 2})])
def test_trains_under_each_strategy(problem, policy, kind, options):
    x, y = problem
    strategy = mgpu_tf.make_strategy(kind, precision=policy, **options)
    assert keras.mixed_precision.dtype_policy().name == policy
    model, losses = _fit(strategy, x, y)
    assert model.layers[0].compute_dtype == COMPUTE_DTYPE[policy]
    assert all(w.dtype == "float32" for w in model.weights)
    is_scaled = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert is_scaled == (policy == "mixed_float16"), "loss scaling is for float16 only"
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses


def test_without_precision_the_policy_is_left_alone():
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    mgpu_tf.make_strategy("default")
    assert keras.mixed_precision.dtype_policy().name == "mixed_bfloat16"


@pytest.mark.multiworker
@pytest.mark.parametrize("policy", ["mixed_float16"])
def test_main_job_trains_on_two_workers(policy):
    code, outputs = workers.run_workers(
        "-m", 2, "mgpu_tf.train", "--strategy=multi_worker", f"--precision={policy}",
        "--compression=float16", "--epochs=2", "--global_batch_size=64", "--width=64")
    assert code == 0, f"A worker failed (exit {code}):\n{outputs.get(0, '')[-3000:]}"
    for index in (0, 1):
        done = main_job.parse_done(outputs[index])
        assert (done["strategy"], done["replicas"]) == ("multi_worker", 2)
        assert np.isfinite(done["test_loss"])
        assert done["test_accuracy"] > 0.5  # ten digit classes: chance is 0.1
