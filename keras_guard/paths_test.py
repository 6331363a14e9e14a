"""Keras' trainer driven through the paths where mgpu_tf's patches act, against one device.

Keras' own tests seldom take these paths under a strategy: a custom training loop with an
optimizer built at its first step (`custom_loop`), and with a model built at its first call
inside `strategy.run` (`lazy_build`), a model's own `train_step` logging
`compute_loss` (`step_loss`), Dropout on each replica (`replica_seeds`), a clipping optimizer
(the `optimizer` hooks), `fit` on `shard_dataset`'s data (`shuffle`), and `fit` and
`evaluate` on 2 worker processes (`multi_worker`). Each test runs under
`--guard-mode=mirrored` only (elsewhere it skips), compares with a hand-computed one-device
result, and fails under the strategy without its patch. The workers' test also takes Keras'
metric reads between steps under several workers, where `metric_reads` acts (its workers
record their coverage beside the run's): what that patch changes, the collectives' keys
TensorFlow keeps, is no outcome of a test here (tests/test_compat_collectives.py checks it).
"""

import io
import json
import os
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf

import keras
import mgpu_tf
from keras_guard import two_workers
from mgpu_tf.cluster import launcher

BATCH = 8


@pytest.fixture
def strategy(guard_strategy):
    if guard_strategy is None:
        pytest.skip("runs under --guard-mode=mirrored only")
    return guard_strategy


def _problem(scale=(1.0, 1.0)):
    """16 examples of 3 features, the rows of each replica's half of a batch scaled apart."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 3)).astype("float32")
    x[0:4] *= scale[0]
    x[4:8] *= scale[1]
    y = rng.normal(size=(16,)).astype("float32")
    w = rng.normal(size=(3, 1)).astype("float32")
    return x, y, w


def _linear(w, model_class=keras.Model):
    inputs = keras.Input((3,))
    dense = keras.layers.Dense(1, use_bias=False, kernel_initializer=keras.initializers.Constant(w))
    return model_class(inputs, dense(inputs))


def _gradient(x, y, w):
    """The gradient of the batch's mean squared error at `w`."""
    return 2.0 * x.T @ (x @ w - y[:, None]) / len(x)


@pytest.mark.parametrize("built", ["in scope", "at its first call"])
def test_a_custom_loop_with_an_unbuilt_optimizer_trains_as_one_device(strategy, built):
    x, y, w = _problem()
    with strategy.scope():
        if built == "in scope":
            model = _linear(w)
        else:  # TensorFlow's custom-loop tutorial: no Input, built in a replica's trace
            model = keras.Sequential([keras.layers.Dense(
                1, use_bias=False, kernel_initializer=keras.initializers.Constant(w))])
        optimizer = keras.optimizers.SGD(0.1, momentum=0.9)  # built at its first apply
    batches = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH))

    @tf.function
    def step(bx, by):
        def replica(bx, by):
            with tf.GradientTape() as tape:
                errors = tf.square(model(bx)[:, 0] - by)
                loss = tf.nn.compute_average_loss(errors, global_batch_size=BATCH)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

        strategy.run(replica, args=(bx, by))

    for bx, by in batches:
        step(bx, by)
    expected, velocity = w.copy(), np.zeros_like(w)
    for start in range(0, len(x), BATCH):
        velocity = 0.9 * velocity - 0.1 * _gradient(x[start:start + BATCH],
                                                    y[start:start + BATCH], expected)
        expected = expected + velocity
    np.testing.assert_allclose(model.get_weights()[0], expected, rtol=1e-5, atol=1e-6)


class OwnStep(keras.Model):
    """The custom `train_step` of Keras' guide: it returns what `compute_loss` gave it."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        # A second log: with the loss alone, Keras logs its loss tracker, which this step
        # leaves at 0, in place of the step's logs.
        return {"loss": loss, "examples": tf.shape(x)[0]}


def test_a_models_own_train_step_logs_the_one_device_loss(strategy):
    x, y, w = _problem()
    with strategy.scope():
        model = _linear(w, OwnStep)
        model.compile(keras.optimizers.SGD(0.0), "mse")  # the weights stay: a loss per batch
    logged = model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    last = slice(len(x) - BATCH, len(x))  # a step's own logs: the last batch's
    expected = np.mean((x[last] @ w - y[last, None]) ** 2)
    np.testing.assert_allclose(logged.history["loss"][0], expected, rtol=1e-5)


def test_dropout_draws_its_own_mask_on_each_replica(strategy):
    with strategy.scope():
        dropout = keras.layers.Dropout(0.5, seed=1)
    ones = strategy.experimental_distribute_values_from_function(lambda _: tf.ones((2, 64)))

    @tf.function
    def masks(x):
        return strategy.run(lambda v: dropout(v, training=True), args=(x,))

    first, second = (part.numpy() != 0 for part in strategy.experimental_local_results(masks(ones)))
    # One device draws one mask for the 4 rows: row i of each replica's half differs.
    assert not np.array_equal(first, second)


def test_clipnorm_clips_the_summed_gradient_as_one_device(strategy):
    x, y, w = _problem(scale=(10.0, 0.1))  # the replicas' gradients far apart in size
    with strategy.scope():
        model = _linear(w)
        model.compile(keras.optimizers.SGD(0.1, clipnorm=1.0), "mse")
    model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    gradient = _gradient(x[:BATCH], y[:BATCH], w)
    expected = w - 0.1 * gradient * min(1.0, 1.0 / np.linalg.norm(gradient))
    np.testing.assert_allclose(model.get_weights()[0], expected, rtol=1e-5, atol=1e-6)


def test_fit_on_shard_datasets_data_neither_shuffles_nor_warns(strategy):
    x, y, w = _problem()
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, BATCH)
    with strategy.scope():
        model = _linear(w)
        model.compile(keras.optimizers.SGD(0.0), "mse")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logged = model.fit(data, epochs=1, verbose=0)  # shuffle=True, Keras' default
    assert not [str(w.message) for w in caught if "shuffle" in str(w.message)]
    np.testing.assert_allclose(logged.history["loss"][0], np.mean((x @ w - y[:, None]) ** 2),
                               rtol=1e-5)


def _worker_environment(coverage):
    """This process' environment for the workers: no cluster of its own, on the CPU, and the
    coverage file prefix when the run records coverage."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CONFIG", "TPU_NAME") and not k.startswith("MGPU_TF_")}
    env.update(CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow")
    env.pop(two_workers.COVERAGE_VARIABLE, None)
    if coverage:
        env[two_workers.COVERAGE_VARIABLE] = coverage
    return env


def test_two_workers_fit_and_evaluate_as_one_device(strategy, guard_coverage, tmp_path):
    x, y, w = _problem()
    epochs = 2
    np.savez(tmp_path / "data.npz", x=x, y=y, w=w, batch=BATCH, epochs=epochs)
    out = io.StringIO()
    code = launcher.launch([sys.executable, "-m", "keras_guard.two_workers",
                            str(tmp_path / "data.npz"), str(tmp_path)], 2,
                           env=_worker_environment(guard_coverage), output=out,
                           grace_seconds=5.0)
    assert code == 0, f"a worker failed (exit {code}):\n{out.getvalue()[-3000:]}"
    expected, losses = w.copy(), []
    for _ in range(epochs):
        batch_losses = []
        for start in range(0, len(x), BATCH):
            bx, by = x[start:start + BATCH], y[start:start + BATCH]
            batch_losses.append(np.mean((bx @ expected - by[:, None]) ** 2))
            expected = expected - 0.1 * _gradient(bx, by, expected)
        losses.append(np.mean(batch_losses))  # equal batches: Keras' mean over the epoch
    for index in (0, 1):
        found = json.loads((tmp_path / f"worker{index}.json").read_text())
        np.testing.assert_allclose(found["kernel"], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(found["history"]["loss"], losses, rtol=1e-5)
        np.testing.assert_allclose(found["evaluate"], np.mean((x @ expected - y[:, None]) ** 2),
                                   rtol=1e-5)
