"""`steps_per_execution` and `jit_compile` under every strategy the toolkit makes.

Each strategy trains the same classifier for two epochs of 7 steps (the last short, so
an execution of 3 steps ends early) with the switches off and on; the weights are
compared with single-device training without them (`support.steps_job`). Without XLA
the only difference is the order of sums over replicas or micro-batches (about 1e-7).
XLA on the CPU fuses the layers and uses its own kernels (tanh among them), which moves
each step by float32 rounding, about 1e-7 relative; over 14 steps that stays far below
the 1e-5 bound used for both (float16 compression amplifies it to about 1e-6).
"""

import json
import math
import sys

import numpy as np
import pytest
import tensorflow as tf

from mgpu_tf.compat import keras_steps
from support import tolerance
from support import workers
from support.compare import relative_difference
from support import steps_job
from support.steps_job import SETTINGS, setting_name

STEPS_PER_EPOCH = steps_job.STEPS_PER_EPOCH
BOUND = tolerance.training(steps_job.EPOCHS * STEPS_PER_EPOCH,
                           steps_job.TERMS + steps_job.GLOBAL_BATCH)


def _weights(path):
    with np.load(path) as data:
        count = sum(name.startswith("w") for name in data.files)
        return [data[f"w{i}"] for i in range(count)]


def _arrays(path):
    with np.load(path) as data:
        return {name: data[name] for name in data.files}


@pytest.fixture(scope="module")
def one_machine(tmp_path_factory):
    """The one-machine runs, in two processes side by side (tracing uses one core)."""
    out = tmp_path_factory.mktemp("one_machine")
    parts = sorted(steps_job.ONE_MACHINE_PARTS)
    results = workers.run_together(
        [[sys.executable, "-m", "support.steps_job", "one_machine", str(out), part]
         for part in parts], [{} for _ in parts], timeout=900)
    for code, output in results:
        assert code == 0, output[-3000:]
    return out


@pytest.fixture(scope="module")
def reference(one_machine):
    """Single-device training without either switch."""
    return _arrays(one_machine / f"{setting_name('default', 1, False)}.npz")


def _run_workers(tmp_path_factory, mode, *args):
    out = tmp_path_factory.mktemp(mode)
    code, output = workers.run_workers("-m", 2, "support.steps_job", mode, out, *args)
    assert code == 0, "\n".join(text[-3000:] for text in output.values())
    return out


@pytest.fixture(scope="module")
def tensorflow_workers(tmp_path_factory):
    return _run_workers(tmp_path_factory, "workers", json.dumps({"transport": "tensorflow"}))


@pytest.fixture(scope="module")
def tcp_workers(tmp_path_factory):
    options = {"transport": "tcp", "compression": "float16", "steps_per_sync": 2}
    return _run_workers(tmp_path_factory, "workers", json.dumps(options))


@pytest.fixture(scope="module")
def hybrid_workers(tmp_path_factory):
    return _run_workers(tmp_path_factory, "hybrid")


def test_keras_still_fails_without_the_fix(one_machine):
    # When this fails, Keras has fixed one of them: narrow KERAS_STEP_VERSIONS.
    errors = json.loads((one_machine / "unpatched.json").read_text())
    assert "You must feed a value for placeholder tensor" in errors["steps_per_execution"]
    assert "Trying to access resource" in errors["jit_compile"]


def test_the_installed_keras_is_the_code_the_fix_replaces():
    import keras

    assert keras_steps.step_fixes_apply(keras.__version__), keras.__version__
    assert keras_steps.source_fingerprints() == keras_steps.known_fingerprints(keras.__version__)


@pytest.mark.parametrize("version, applies", [("3.7.0", False), ("3.8.0", True),
                                              ("3.11.3", True), ("3.12.0", True),
                                              ("3.15.1", True), ("3.16.0", True),
                                              ("3.17.0", False)])
def test_the_fix_is_for_the_versions_it_names(version, applies):
    assert keras_steps.step_fixes_apply(version) is applies


def test_another_keras_version_is_left_alone(caplog):
    with caplog.at_level("INFO", logger="mgpu_tf"):
        assert keras_steps.apply_step_fixes(keras_version="3.17.0") is False
    assert "outside 3.8-3.16" in caplog.text


def test_tpu_and_no_strategy_keep_keras_own_functions():
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    assert not keras_steps._wants_fix(model)  # no strategy: Keras' own code
    model._distribute_strategy = object.__new__(tf.distribute.TPUStrategy)
    assert not keras_steps._wants_fix(model)  # TPUStrategy: Keras' own XLA path
    model._distribute_strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    assert keras_steps._wants_fix(model)


def _one_machine_runs(kind, weighted=False):
    for part in steps_job.ONE_MACHINE_PARTS.values():
        for run_kind, _, weights, settings in part:
            if run_kind == kind and bool(weights) == weighted:
                return settings
    raise AssertionError(f"no one-machine run of {kind}")


@pytest.mark.parametrize("kind, steps, jit", [
    (kind, steps, jit) for kind in ("default", "one_device", "mirrored", "model_parallel")
    for steps, jit in _one_machine_runs(kind)])
def test_same_weights_as_one_device_without_the_switches(one_machine, reference, kind, steps,
                                                         jit):
    run = _arrays(one_machine / f"{setting_name(kind, steps, jit)}.npz")
    assert relative_difference(_weights(one_machine / f"{setting_name(kind, steps, jit)}.npz"),
                               _weights(one_machine / "default-spe1-plain.npz")) < BOUND
    np.testing.assert_allclose(run["evaluation"], reference["evaluation"], rtol=BOUND)
    assert relative_difference([run["predictions"]], [reference["predictions"]]) < BOUND


@pytest.mark.parametrize("steps, jit", _one_machine_runs("mirrored", weighted=True))
def test_weighted_shards_deliver_each_example_once_in_short_executions(one_machine, steps,
                                                                       jit):
    # Weights [2, 1] give the replicas batches of 22 and 10, and a last batch of 5 and 3:
    # the update equals one device's only if every example counts once, unbiased.
    name = setting_name("mirrored-weighted", steps, jit)
    assert relative_difference(_weights(one_machine / f"{name}.npz"),
                               _weights(one_machine / "default-spe1-plain.npz")) < BOUND


def _executions(steps):
    return math.ceil(STEPS_PER_EPOCH / steps)


@pytest.mark.parametrize("steps, jit", SETTINGS)
def test_workers_train_like_one_device(tensorflow_workers, one_machine, reference, steps, jit):
    name = setting_name("workers", steps, jit)
    first, second = (_weights(tensorflow_workers / f"{name}-{i}.npz") for i in (0, 1))
    assert relative_difference(first, second) == 0
    assert relative_difference(first, _weights(one_machine / "default-spe1-plain.npz")) < BOUND
    for index in (0, 1):
        run = _arrays(tensorflow_workers / f"{name}-{index}.npz")
        np.testing.assert_allclose(run["evaluation"], reference["evaluation"], rtol=BOUND)
        assert relative_difference([run["predictions"]], [reference["predictions"]]) < BOUND


@pytest.mark.parametrize("steps, jit", SETTINGS)
def test_logs_are_averaged_over_workers_once_per_execution(tensorflow_workers, steps, jit):
    run = _arrays(tensorflow_workers / f"{setting_name('workers', steps, jit)}-0.npz")
    # Two epochs of fit, then one evaluation, each execution averaging its logs once.
    assert int(run["log_means"]) == 3 * _executions(steps)


@pytest.mark.parametrize("steps, jit", SETTINGS)
def test_chief_only_checkpoints_see_every_epoch(tensorflow_workers, steps, jit):
    name = setting_name("workers", steps, jit)
    written = sorted(p.name for p in tensorflow_workers.glob(f"{name}-ckpt-*"))
    assert written == [f"{name}-ckpt-0-1.weights.h5", f"{name}-ckpt-0-2.weights.h5"]


@pytest.mark.parametrize("steps, jit", SETTINGS)
def test_tcp_compression_and_accumulation_keep_their_update(tcp_workers, steps, jit):
    name = setting_name("workers", steps, jit)
    first, second = (_weights(tcp_workers / f"{name}-{i}.npz") for i in (0, 1))
    assert relative_difference(first, second) == 0
    without = _weights(tcp_workers / f"{setting_name('workers', 1, False)}-0.npz")
    assert relative_difference(first, without) < BOUND


@pytest.mark.parametrize("steps, jit", SETTINGS)
def test_hybrid_trains_like_one_device(hybrid_workers, one_machine, steps, jit):
    name = setting_name("hybrid", steps, jit)
    first, second = (_weights(hybrid_workers / f"{name}-{i}.npz") for i in (0, 1))
    assert relative_difference(first, second) == 0
    assert relative_difference(first, _weights(one_machine / "default-spe1-plain.npz")) < BOUND


def test_model_parallel_refuses_an_unknown_jit_compile():
    import keras

    import mgpu_tf

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    wrapped = mgpu_tf.ModelParallel(model, ["/cpu:0"])
    with pytest.raises(ValueError, match="`jit_compile` must be True, False or 'auto'. "
                                         "Received: jit_compile='yes'"):
        wrapped.compile(optimizer="sgd", loss="mse", jit_compile="yes")


@pytest.mark.parametrize("argv, match", [
    (["--jit_compile=maybe"], "`jit_compile` must be one of auto, true, false"),
    (["--steps_per_execution=0"], "`steps_per_execution` must be at least 1"),
])
def test_bad_switch_flags_fail_at_parse_time(argv, match):
    from absl import flags

    from mgpu_tf import flags as mgpu_flags

    flag_values = flags.FlagValues()
    mgpu_flags.define_flags(flag_values)
    with pytest.raises(flags.IllegalFlagValueError, match=match):
        flag_values(["prog", *argv])


def test_switch_flags_become_compile_arguments():
    from absl import flags

    from mgpu_tf import flags as mgpu_flags

    flag_values = flags.FlagValues()
    mgpu_flags.define_flags(flag_values)
    flag_values(["prog", "--jit_compile=TRUE", "--steps_per_execution=8"])
    assert mgpu_flags.compile_options(flag_values) == {"jit_compile": True,
                                                       "steps_per_execution": 8}


def test_predict_with_jit_compile_under_mirrored_gives_the_model_output():
    # Keras 3.8-3.11 compiled predict's step across the replicas and failed ("Trying to
    # access resource .../replica_1/..."); the fix runs it without XLA there.
    import keras

    import mgpu_tf

    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="tanh"),
                                  keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    x = np.linspace(-1.0, 1.0, 64, dtype="float32").reshape(16, 4)
    np.testing.assert_allclose(model.predict(x, batch_size=8, verbose=0), model(x).numpy(),
                               rtol=1e-5, atol=1e-6)
