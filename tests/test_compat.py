"""Tests for mgpu_tf.compat: the Keras multi-worker fixes for keras-team/keras#20585, and
a collective key range of its own for each MirroredStrategy."""

import hashlib
import inspect
import logging

import keras
import pytest
import tensorflow as tf
from keras.src.backend.tensorflow import trainer

import mgpu_tf
from mgpu_tf import compat
from mgpu_tf.compat import collective_keys, multi_worker, private_trainer, versions
from support import workers

# Keras' TensorFlow trainer class, `TensorFlowTrainer` in the fingerprints' names (renamed
# `Trainer` in Keras 3.16).
TRAINER_CLASS = private_trainer.trainer_classes()[0]

# sha256 of the source of the Keras code the patch wraps, by the Keras releases that have
# it (3.11 made the epoch iterator yield a first and last step): the same from 3.8 to
# 3.16.0.dev2026102704 but for the iteration in `_maybe_symbolic_build`.
FINGERPRINTED_AT = "3.8.0 to 3.16.0.dev2026102704"
FINGERPRINTS = {
    "TensorFlowTrainer._maybe_symbolic_build": {
        ((3, 8), (3, 10)): "181752273e37d689f7dd4915f31a454130a3761290dc4b6d351465b85d4c6b81",
        ((3, 11), (3, 16)): "92a504f5eba9b29f81f1bf26180bdd5bf5186b06b7bda426534b90d2d02bc1c2",
    },
    "reduce_per_replica": {
        ((3, 8), (3, 16)): "2e7d54b1e6edc29a8c6a7e6b66cd4c8be3ba7842412c93753ac3afe169fa7fb8",
    },
    "_collective_all_reduce_multi_worker": {
        ((3, 8), (3, 16)): "0302369d850e6694978fa7691c0e97b79cd0cf83a6bbef7caed8738e1f1a5c24",
    },
}
SIGNATURES = {
    "TensorFlowTrainer._maybe_symbolic_build": "(self, iterator=None, data_batch=None)",
    "reduce_per_replica": "(values, strategy, reduction)",
    "_collective_all_reduce_multi_worker": "(strategy)",
}

in_range = pytest.mark.skipif(
    not compat.multi_worker_fixes_apply(keras.__version__),
    reason=f"the patch is not applied to Keras {keras.__version__}")


def _keras_function(name):
    """Returns Keras' own function `name` of the TF trainer, under any patch."""
    owner, _, attribute = name.rpartition(".")
    function = getattr(TRAINER_CLASS if owner else trainer, attribute)
    return inspect.unwrap(function)


def _patched_functions():
    return (TRAINER_CLASS._maybe_symbolic_build, trainer.reduce_per_replica)


@pytest.fixture
def unpatched_keras(monkeypatch):
    """Puts Keras' own functions back for one test; the patch (if any) returns after it."""
    monkeypatch.setattr(TRAINER_CLASS, "_maybe_symbolic_build",
                        _keras_function("TensorFlowTrainer._maybe_symbolic_build"))
    monkeypatch.setattr(trainer, "reduce_per_replica", _keras_function("reduce_per_replica"))
    monkeypatch.setattr(multi_worker, "_reported", set())


# ------------------------------------------------------------------ version guard


@pytest.mark.parametrize("version, applies", [
    ("3.7.0", False), ("3.8.0", True), ("3.15.0", True), ("3.15.1", True), ("3.15.9", True),
    ("3.15.2rc1", True), ("2.15.0", False), ("3.16.0", True), ("3.16.0.dev2026010103", True),
    ("3.17.0", False),
    ("4.0.0", False),
])
def test_version_range(version, applies):
    assert compat.multi_worker_fixes_apply(version) is applies


@pytest.mark.parametrize("version, error", [
    ("three", ValueError), ("", ValueError), (3.15, TypeError), (None, TypeError)])
def test_version_must_be_a_version_string(version, error):
    with pytest.raises(error, match="`keras_version` must"):
        compat.multi_worker_fixes_apply(version)


@pytest.mark.parametrize("version", ["2.15.0", "3.17.0", "4.1.0"])
def test_outside_range_changes_nothing(unpatched_keras, caplog, version):
    before = _patched_functions()
    with caplog.at_level(logging.INFO, logger="mgpu_tf"):
        assert compat.apply_multi_worker_fixes(keras_version=version) is False
    assert _patched_functions() == before
    assert [r.getMessage() for r in caplog.records] == [
        "mgpu_tf: not patching Keras for keras-team/keras#20585: "
        f"Keras {version} is outside 3.8-3.16, the versions it is for."]


def test_other_backend_changes_nothing(unpatched_keras, monkeypatch, caplog):
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    before = _patched_functions()
    with caplog.at_level(logging.INFO, logger="mgpu_tf"):
        assert compat.apply_multi_worker_fixes(keras_version="3.15.1") is False
    assert _patched_functions() == before
    assert "the Keras backend is 'jax'" in caplog.text


@in_range
def test_patches_once_and_logs_one_debug_line(unpatched_keras, caplog):
    # At DEBUG: `mgpu-tf env` lists the patches; a job does not announce them.
    originals = _patched_functions()
    with caplog.at_level(logging.DEBUG, logger="mgpu_tf"):
        assert compat.apply_multi_worker_fixes() is True
        patched = _patched_functions()
        assert compat.apply_multi_worker_fixes() is True
    assert _patched_functions() == patched
    assert [inspect.unwrap(f) for f in patched] == list(originals)
    assert patched != originals
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and caplog.records[0].levelno == logging.DEBUG
    assert messages[0].startswith(f"mgpu_tf: patched Keras {keras.__version__} "
                                  "(keras-team/keras#20585)")
    assert "_maybe_symbolic_build" in messages[0] and "reduce_per_replica" in messages[0]


@in_range
def test_patch_keeps_one_machine_reduction(unpatched_keras):
    compat.apply_multi_worker_fixes()
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)

    @tf.function
    def step():
        logs = strategy.run(lambda: {"loss": tf.cast(
            tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)})
        return (trainer.reduce_per_replica(logs, strategy, "auto"),
                inspect.unwrap(trainer.reduce_per_replica)(logs, strategy, "auto"))

    patched, original = step()
    assert float(patched["loss"]) == float(original["loss"]) == 0.5


def test_public_names_stay_in_one_place():
    assert compat.__all__ == ["KERAS_20585_VERSIONS", "KERAS_STEP_VERSIONS",
                              "apply_multi_worker_fixes", "apply_step_fixes",
                              "distinct_collective_keys", "multi_worker_fixes_apply",
                              "set_log_mean", "step_fixes_apply"]
    assert mgpu_tf.compat.apply_multi_worker_fixes is multi_worker.apply_multi_worker_fixes
    assert compat.distinct_collective_keys is collective_keys.distinct_collective_keys


@in_range
def test_a_trainer_without_a_wrapped_function_is_skipped_with_the_reason(
        unpatched_keras, monkeypatch, caplog):
    # Keras 3.0-3.4 had no _maybe_symbolic_build.
    monkeypatch.delattr(TRAINER_CLASS, "_maybe_symbolic_build")
    reduce = trainer.reduce_per_replica
    with caplog.at_level(logging.INFO, logger="mgpu_tf"):
        assert compat.apply_multi_worker_fixes() is False
    assert trainer.reduce_per_replica is reduce
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith("mgpu_tf: not patching Keras for keras-team/keras#20585: ")
    assert "private `TensorFlowTrainer._maybe_symbolic_build`" in message
    assert "pip install 'keras>=3.8,<3.17'" in message


def test_build_falls_back_to_keras_when_the_model_hides_its_strategy(monkeypatch, caplog):
    monkeypatch.setattr(multi_worker, "_reported", set())
    calls = []

    def keras_build(self, iterator=None, data_batch=None):
        calls.append((iterator, data_batch))

    class NoStrategy:  # a model whose Keras keeps its strategy elsewhere
        name = "model"

    iterator = iter([])
    with caplog.at_level(logging.INFO, logger="mgpu_tf"):
        multi_worker._build_from_first_replica(keras_build)(NoStrategy(), iterator=iterator)
    assert calls == [(iterator, None)]
    assert "private `Trainer._distribute_strategy`" in caplog.text
    assert "Keras' own build runs" in caplog.text


# ------------------------------------------------------------------ collective keys


def test_each_block_gives_the_strategy_its_own_collective_keys():
    cls = tf.distribute.MirroredStrategy
    before = cls._collective_key_base
    with compat.distinct_collective_keys():
        first = cls._collective_key_base
    with compat.distinct_collective_keys():
        second = cls._collective_key_base
    assert cls._collective_key_base == before
    assert len({before, first, second}) == 3


def test_collective_keys_of_different_sizes_do_not_clash():
    # Without distinct keys the second all-reduce fails: "... is joining a group with
    # size 2, but that group has size 4" (tensorflow/tensorflow#61314).
    results = []
    for devices in (4, 2):
        with compat.distinct_collective_keys():
            strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(devices)])
        total = strategy.run(tf.function(lambda: tf.distribute.get_replica_context().all_reduce(
            "sum", tf.constant(1.0))))
        results.append(float(strategy.experimental_local_results(total)[0]))
    assert results == [4.0, 2.0]


def test_a_tensorflow_without_collective_key_base_keeps_its_keys(monkeypatch, caplog):
    monkeypatch.delattr(tf.distribute.MirroredStrategy, "_collective_key_base")
    monkeypatch.setattr(collective_keys, "_reported", set())
    with caplog.at_level(logging.INFO, logger="mgpu_tf"):
        with compat.distinct_collective_keys():
            pass
        with compat.distinct_collective_keys():
            pass
    assert not hasattr(tf.distribute.MirroredStrategy, "_collective_key_base")
    [record] = caplog.records
    assert record.getMessage().startswith("mgpu_tf: keeping TensorFlow's collective keys: ")
    assert "private `MirroredStrategy._collective_key_base`" in record.getMessage()


# ------------------------------------------------------------------ upstream code


@in_range
@pytest.mark.parametrize("name", sorted(FINGERPRINTS))
def test_patched_keras_code_is_unchanged(name):
    source = inspect.getsource(_keras_function(name))
    assert str(inspect.signature(_keras_function(name))) == SIGNATURES[name], (
        f"Keras {keras.__version__} changed the signature of {name}, which "
        "mgpu_tf/compat/multi_worker.py wraps for keras-team/keras#20585. Re-read it and "
        "fit the wrapper to it.")
    known = [fingerprint for (first, last), fingerprint in FINGERPRINTS[name].items()
             if versions.release_in(keras.__version__, first, last)]
    assert hashlib.sha256(source.encode()).hexdigest() in known, (
        f"Keras {keras.__version__} has another {name} (keras/src/backend/tensorflow/trainer.py) "
        f"than the releases {FINGERPRINTED_AT} that mgpu_tf/compat/multi_worker.py's patch for "
        "keras-team/keras#20585 was written against. Re-read it: if the patch still fits, "
        "update FINGERPRINTS in this file; if Keras fixed the bug, narrow "
        "compat.KERAS_20585_VERSIONS to end before this version.")


@in_range
@pytest.mark.parametrize("caller", ["_make_function", "make_predict_function"])
def test_keras_calls_reduce_per_replica_by_module_name(caller):
    # The patch replaces the module's global; a caller holding another reference would miss it.
    source = inspect.getsource(getattr(TRAINER_CLASS, caller))
    assert "reduce_per_replica(" in source, (
        f"Keras {keras.__version__}'s TensorFlowTrainer.{caller} no longer calls "
        "reduce_per_replica, which mgpu_tf/compat/multi_worker.py patches for "
        "keras-team/keras#20585.")


# ------------------------------------------------------------------ real workers


@pytest.fixture(scope="module")
def keras_loop():
    """Runs support/mw_keras_loop.py as two workers once; returns (exit code, {index: lines})."""
    code, outputs = workers.run_workers("-m", 2, "support.mw_keras_loop")
    return code, {i: text.splitlines() for i, text in outputs.items()}


def _finding(lines, name):
    found = [line.split(": ", 1)[1] for line in lines if line.startswith(name + ": ")]
    return found[-1] if found else None


@pytest.mark.multiworker
@pytest.mark.parametrize("part", ["symbolic build", "log reduction"])
def test_upstream_bug_matches_version_guard(keras_loop, part):
    _, outputs = keras_loop
    findings = {i: _finding(lines, f"keras-20585 {part}") for i, lines in outputs.items()}
    applies = compat.multi_worker_fixes_apply(keras.__version__)
    assert set(findings.values()) <= {"broken", "fixed"} and len(findings) == 2, (
        f"The workers did not report on keras-team/keras#20585 ({part}):\n"
        + "\n".join(outputs.get(0, [])))
    if applies:
        assert set(findings.values()) == {"broken"}, (
            f"Keras {keras.__version__} no longer has keras-team/keras#20585 ({part}): "
            "narrow compat.KERAS_20585_VERSIONS in mgpu_tf/compat/multi_worker.py to end before "
            f"{keras.__version__}, or drop the patch for this part.")
    else:
        assert set(findings.values()) == {"fixed"}, (
            f"Keras {keras.__version__} still has keras-team/keras#20585 ({part}) but is "
            "outside compat.KERAS_20585_VERSIONS: check test_patched_keras_code_is_unchanged "
            "against this version and widen the range.")


@pytest.mark.multiworker
def test_fit_evaluate_predict_on_two_workers(keras_loop):
    code, outputs = keras_loop
    report = "\n".join(outputs.get(0, []))
    assert code == 0, f"A worker failed (exit {code}):\n{report}"
    for index, lines in outputs.items():
        for part in ("fit", "evaluate", "metric reads", "predict"):
            assert _finding(lines, part) == "ok", f"worker {index} {part}:\n" + "\n".join(lines)
        # The patch works above, unannounced: `mgpu-tf env` lists it, DEBUG logs it.
        assert not any("(keras-team/keras#20585)" in line for line in lines), lines
    assert _finding(outputs[0], "weights") == _finding(outputs[1], "weights")
    assert _finding(outputs[0], "weights") is not None
