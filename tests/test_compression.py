"""Compressed all-reduce: 16 bits on the wire, float32 in the update.

The reference is computed by hand: each replica's gradient of its slice of the
global batch (plain TensorFlow, no strategy), cast to the wire dtype, summed in
that dtype, cast back, and applied by SGD. Training with `compression` must give
that update, and differ from the float32 update only by the rounding.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.comm import compression
from mgpu_tf.comm import optimizer_step
from mgpu_tf.comm import prepare as communication
from support import compare
from support import mw_equivalence
from support import workers

GLOBAL_BATCH = 8
# Unit roundoff of each wire dtype: the relative rounding of one cast.
EPSILON = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


@pytest.fixture(scope="module")
def problem():
    rng = np.random.RandomState(11)
    x = rng.normal(size=(GLOBAL_BATCH, 5)).astype("float32")
    y = (np.sin(x[:, :1]) + 0.5 * x[:, 1:2]).astype("float32")
    shapes = [w.shape for w in mw_equivalence.build_model(None).get_weights()]
    weights = [rng.normal(scale=0.5, size=s).astype("float32") for s in shapes]
    return x, y, weights


def _replica_gradients(x, y, weights, replicas):
    """Each replica's gradient of its consecutive slice, as tf.distribute scales it."""
    model = mw_equivalence.build_model(weights)
    grads = []
    for xs, ys in zip(np.split(x, replicas), np.split(y, replicas)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xs) - ys)) / replicas
        grads.append([g.numpy() for g in tape.gradient(loss, model.trainable_weights)])
    return grads


def _hand_update(weights, grads, wire):
    """SGD with the replicas' gradients summed in `wire` (None: float32)."""
    out = []
    for i, w in enumerate(weights):
        if wire is None:
            total = sum(g[i] for g in grads)
        else:
            total = tf.cast(tf.add_n([tf.cast(g[i], wire) for g in grads]), tf.float32).numpy()
        out.append(w - mw_equivalence.LEARNING_RATE * total)
    return out


def _check_rounded_update(trained, weights, grads, wire):
    compressed = _hand_update(weights, grads, wire)
    exact = _hand_update(weights, grads, None)
    step = [np.abs(w - e) for w, e in zip(weights, exact)]
    # A gradient computed in another process may round to the neighbouring value.
    for t, c, s in zip(trained, compressed, step):
        np.testing.assert_allclose(t, c, rtol=0, atol=1e-6 + 4 * EPSILON[wire] * s.max())
    differences = [np.abs(t - e).max() for t, e in zip(trained, exact)]
    assert max(differences) > 0, "the update is the float32 one: nothing was compressed"
    for t, e, s in zip(trained, exact, step):
        assert np.all(np.abs(t - e) <= 1e-6 + 4 * EPSILON[wire] * s.max())


# The launcher gives the workers a job secret; an empty MGPU_TF_JOB_SECRET is none.
@pytest.mark.multiworker
@pytest.mark.parametrize("options, secret, ring, line", [
    ({}, None, True, "transport 'auto' chose 'tcp': 2 CPU workers with a job secret"),
    ({}, "", False, "transport 'auto' chose 'tensorflow': no job secret (MGPU_TF_JOB_SECRET)"),
], ids=["auto-with-secret", "auto-without"])
def test_auto_transport_takes_the_ring_between_cpu_workers_with_a_secret(
        problem, tmp_path, options, secret, ring, line):
    x, y, weights = problem
    exact = _hand_update(weights, _replica_gradients(x, y, weights, 2), None)
    env = None if secret is None else {"MGPU_TF_JOB_SECRET": secret}
    outputs = {}
    for trained in _train_two_workers(problem, tmp_path, options, env, outputs):
        for t, e in zip(trained, exact):
            np.testing.assert_allclose(t, e, rtol=1e-5, atol=1e-6)
    _check_transport(outputs, ring, line)


def _check_transport(outputs, ring, line):
    """Each worker logged `line` once (none for a transport given) and trained over `ring`."""
    for index in (0, 1):
        chose = [text for text in outputs[index].splitlines() if "transport 'auto' chose" in text]
        if line is None:  # a transport given is taken as it is
            assert chose == [], chose
        else:
            assert len(chose) == 1 and line in chose[0], outputs[index][-3000:]
        over = "over the tcp ring" if ring else "over TensorFlow's collectives"
        assert f"worker {index} of 2 replicas: done {over}" in outputs[index], outputs[index][-3000:]


@pytest.mark.parametrize("value, expected", [
    ("float16", "float16"), ("BFLOAT16", "bfloat16"), ("none", "none"),
    (compression.Compression.FLOAT16, "float16")])
def test_check_compression_accepts_the_names(value, expected):
    assert compression.check_compression(value) == expected


@pytest.mark.parametrize("value", ["fp8", "float32", 16, None])
def test_bad_compression_fails_with_the_choices(value):
    with pytest.raises(ValueError, match="`compression` must be one of none, float16, bfloat16"):
        mgpu_tf.make_strategy("mirrored", devices=2, compression=value or "half")


def test_compression_does_not_apply_to_one_device():
    with pytest.raises(ValueError, match="`compression` does not apply to strategy 'one_device'"):
        mgpu_tf.make_strategy("one_device", compression="float16")


def test_no_compression_leaves_the_model_and_optimizer_alone():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2, compression="none")
    assert communication.settings(strategy) == {}
    with strategy.scope():
        model = mw_equivalence.build_model(None)
        assert mgpu_tf.prepare_model(model, strategy) is model
    assert "_all_reduce_sum_gradients" not in vars(model.optimizer)


@pytest.mark.parametrize("wire", ["float16", "bfloat16"])
@pytest.mark.parametrize("devices", [2, 4])
def test_mirrored_update_is_the_rounded_float32_update(problem, wire, devices):
    x, y, weights = problem
    strategy = mgpu_tf.make_strategy("mirrored", devices=devices, compression=wire)
    with strategy.scope():
        model = mgpu_tf.prepare_model(mw_equivalence.build_model(weights), strategy)
    model.fit(mw_equivalence.global_batches(x, y, GLOBAL_BATCH), epochs=1, shuffle=False, verbose=0)
    _check_rounded_update(model.get_weights(), weights, _replica_gradients(x, y, weights, devices),
                          wire)


def test_compile_after_prepare_model_gets_the_compression(problem):
    x, y, weights = problem
    strategy = mgpu_tf.make_strategy("mirrored", devices=2, compression="float16")
    with strategy.scope():
        model = mgpu_tf.prepare_model(mw_equivalence.build_model(weights), strategy)
        model.compile(optimizer=keras.optimizers.SGD(mw_equivalence.LEARNING_RATE), loss="mse")
    model.fit(mw_equivalence.global_batches(x, y, GLOBAL_BATCH), epochs=1, shuffle=False, verbose=0)
    _check_rounded_update(model.get_weights(), weights, _replica_gradients(x, y, weights, 2),
                          "float16")


def test_a_model_compiled_under_the_strategy_gets_the_compression_without_prepare_model(problem):
    x, y, weights = problem
    strategy = mgpu_tf.make_strategy("mirrored", devices=2, compression="float16")
    with strategy.scope():
        model = mw_equivalence.build_model(weights)  # compiled, never given to prepare_model
    assert optimizer_step.find(model.optimizer).communication[0] == "float16"
    model.fit(mw_equivalence.global_batches(x, y, GLOBAL_BATCH), epochs=1, shuffle=False, verbose=0)
    _check_rounded_update(model.get_weights(), weights, _replica_gradients(x, y, weights, 2),
                          "float16")


def test_a_second_install_with_other_options_is_refused_and_the_same_changes_nothing(problem):
    _, _, weights = problem
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    with strategy.scope():
        model = mw_equivalence.build_model(weights)
    communication.install(model.optimizer, strategy, compression="bfloat16")
    hook = optimizer_step.find(model.optimizer)
    summed_by = hook.gradient_sum
    communication.install(model.optimizer, strategy, compression="bfloat16")
    assert hook.gradient_sum is summed_by
    with pytest.raises(ValueError, match=r"\(compression=<Compression.BFLOAT16.*Received: "
                                         r"compression=<Compression.FLOAT16.*before `compile`"):
        communication.install(model.optimizer, strategy, compression="float16")
    assert hook.communication[0] == "bfloat16" and hook.gradient_sum is summed_by


def test_compile_keeps_the_options_installed_before_it(problem):
    x, y, weights = problem
    strategy = mgpu_tf.make_strategy("mirrored", devices=2, compression="bfloat16")
    optimizer = keras.optimizers.SGD(mw_equivalence.LEARNING_RATE)
    communication.install(optimizer, strategy, compression="float16")
    with strategy.scope():
        model = mw_equivalence.build_model(weights)
        model.compile(optimizer=optimizer, loss="mse")
    assert optimizer_step.find(model.optimizer).communication[0] == "float16"
    model.fit(mw_equivalence.global_batches(x, y, GLOBAL_BATCH), epochs=1, shuffle=False, verbose=0)
    _check_rounded_update(model.get_weights(), weights, _replica_gradients(x, y, weights, 2),
                          "float16")


def _train_two_workers(problem, tmp_path, options, env=None, outputs=None):
    """Trains one global batch on 2 workers; yields each worker's weights.

    Also checks the loss each worker logged for the step: the mean over both
    workers' halves, i.e. the loss of the initial weights on the whole batch.
    `env` is added to the workers' environment; `outputs` (a dict) receives their output.
    """
    x, y, weights = problem
    data = tmp_path / "data.npz"
    np.savez(data, x=x, y=y, global_batch=GLOBAL_BATCH,
             **{f"w{i}": w for i, w in enumerate(weights)})
    code, printed = workers.run_workers("-m", 2, "support.mw_communication", data, tmp_path,
                                        json.dumps(options), env=env)
    assert code == 0, f"A worker failed (exit {code}):\n{printed.get(0, '')[-3000:]}"
    if outputs is not None:
        outputs.update(printed)
    whole_batch_loss = float(np.mean((mw_equivalence.build_model(weights)(x).numpy() - y) ** 2))
    for index in (0, 1):
        saved = tmp_path / f"worker{index}.npz"
        np.testing.assert_allclose(np.load(saved)["batch_losses"], [whole_batch_loss], rtol=1e-5)
        yield compare.saved_weights(saved)


# A transport given is taken as it is: TensorFlow's collectives though the launcher gave a
# job secret, the tcp ring though there is none.
@pytest.mark.multiworker
@pytest.mark.parametrize("transport, secret", [("tensorflow", None), ("tcp", "")],
                         ids=["tensorflow", "tcp"])
def test_two_workers_update_is_the_rounded_float32_update(problem, tmp_path, transport, secret):
    x, y, weights = problem
    grads = _replica_gradients(x, y, weights, 2)
    env = None if secret is None else {"MGPU_TF_JOB_SECRET": secret}
    outputs = {}
    for trained in _train_two_workers(problem, tmp_path,
                                      {"compression": "float16", "transport": transport},
                                      env, outputs):
        _check_rounded_update(trained, weights, grads, "float16")
    _check_transport(outputs, transport == "tcp", None)
