"""Training with ModelParallel equals training the same model on one device."""

import json
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from support import compare
from support import models
from support import tolerance
from support import workers

DEVICES = ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
# The longest chain of sums behind a gradient of models.mlp() on 12 rows: its
# inputs' widths forward (8 + 16 * 3), back (1 + 16 * 2) and the batch.
TERMS = 8 + 16 * 3 + 1 + 16 * 2 + 12
GRADIENTS = tolerance.training(1, TERMS)  # one gradient, no update
FIT_STEPS = 8
FIT = tolerance.training(FIT_STEPS, TERMS, optimizer="adam")


def _data(rows=48, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(rows, 8)).astype("float32"), rng.normal(size=(rows, 1)).astype(
        "float32")


def _assert_same_weights(model, reference, bound=GRADIENTS):
    assert compare.relative_difference(model.get_weights(), reference.get_weights()) < bound


def _assert_identical_weights(model, source):
    """Weights read back from a file: bit for bit."""
    for got, want in zip(model.get_weights(), source.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)


def _assert_same_values(got, want, bound=GRADIENTS):
    """Arrays equal to rounding, on the scale of their largest value."""
    assert compare.relative_difference([np.asarray(g) for g in got],
                                       [np.asarray(w) for w in want]) < bound


def _gradients(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    return tape.gradient(loss, model.trainable_variables)


@pytest.mark.parametrize("microbatches", [1, 2, 4])
def test_pipelined_gradients_equal_unsplit(microbatches):
    x, y = _data(16)
    reference = models.mlp()
    model = mgpu_tf.ModelParallel(models.mlp(), DEVICES[:2], microbatches=microbatches)
    _assert_same_values(_gradients(model, x, y), _gradients(reference, x, y))


@pytest.mark.parametrize("rows", [13, 3])
def test_batch_not_divided_by_microbatches_gives_short_last_microbatch(rows):
    x, y = _data(rows)
    model = mgpu_tf.ModelParallel(models.mlp(), DEVICES[:2], microbatches=4)
    reference = models.mlp()
    _assert_same_values([model(x)], [reference(x)])
    _assert_same_values(_gradients(model, x, y), _gradients(reference, x, y))


def test_fit_with_a_short_last_batch_matches_reference():
    x, y = _data(13)  # batches of 5, 5 and 3 rows, each split into 4 micro-batches
    reference = models.mlp()
    model = mgpu_tf.ModelParallel(models.mlp(), DEVICES[:2], microbatches=4)
    for m in (reference, model):
        m.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        m.fit(x, y, batch_size=5, epochs=2, shuffle=False, verbose=0)
    _assert_same_weights(model, reference, tolerance.training(6, TERMS))


@pytest.mark.parametrize("builder, devices, microbatches", [
    (models.mlp, DEVICES[:2], 4),
    (models.mlp, DEVICES, 2),
    (models.residual, DEVICES[:2], 3),
])
def test_fit_matches_single_device_reference_after_k_steps(builder, devices, microbatches):
    x, y = _data(48)
    reference = builder()
    model = mgpu_tf.ModelParallel(builder(), devices, microbatches=microbatches)
    for m in (reference, model):
        m.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"])
    got = model.fit(x, y, batch_size=12, epochs=2, shuffle=False, verbose=0)  # 8 steps
    want = reference.fit(x, y, batch_size=12, epochs=2, shuffle=False, verbose=0)
    _assert_same_weights(model, reference, FIT)
    np.testing.assert_allclose(got.history["loss"], want.history["loss"], rtol=FIT)
    np.testing.assert_allclose(model.evaluate(x, y, verbose=0), reference.evaluate(x, y, verbose=0),
                               rtol=FIT)
    _assert_same_values([model.predict(x, batch_size=10, verbose=0)],
                        [reference.predict(x, batch_size=10, verbose=0)], FIT)


@pytest.mark.parametrize("builder", [models.mlp, models.residual])
def test_fit_tolerance_rejects_a_wrong_update(builder):
    """FIT lets rounding pass, not a 1% learning-rate error or one step missing."""
    x, y = _data(48)

    def trained(learning_rate=0.01, rows=48):
        model = builder()
        model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss="mse")
        model.fit(x[:rows], y[:rows], batch_size=12, epochs=2, shuffle=False, verbose=0)
        return model.get_weights()

    wrong = {"learning rate 1% high": trained(learning_rate=0.0101),
             "one step missing": trained(rows=36)}  # 3 steps an epoch, not 4
    assert tolerance.rejects(FIT, trained(), wrong, compare.relative_difference) == []


def test_callbacks_run_and_checkpoint_reloads(tmp_path):
    x, y = _data(32)
    model = mgpu_tf.ModelParallel(models.mlp(), DEVICES[:2], microbatches=2)
    model.compile(optimizer="sgd", loss="mse")
    seen = []
    model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[
        keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(logs["loss"])),
        keras.callbacks.ModelCheckpoint(str(tmp_path / "best.keras")),
        keras.callbacks.ModelCheckpoint(str(tmp_path / "w.weights.h5"), save_weights_only=True),
    ])
    assert len(seen) == 2
    restored = keras.models.load_model(tmp_path / "best.keras")
    _assert_same_values([restored.predict(x, verbose=0)], [model.predict(x, verbose=0)])
    plain = models.mlp(seed=5)
    plain.load_weights(tmp_path / "w.weights.h5")
    _assert_identical_weights(plain, model)


def test_weights_round_trip_through_files(tmp_path):
    source = mgpu_tf.ModelParallel(models.mlp(seed=3), DEVICES[:2])
    source.save_weights(tmp_path / "a.weights.h5")
    target = mgpu_tf.ModelParallel(models.mlp(seed=4), DEVICES[2:])
    target.load_weights(tmp_path / "a.weights.h5")
    _assert_identical_weights(target, source)
    for variable in target.weights:  # loading keeps the placement
        assert variable.value.device.endswith(("CPU:2", "CPU:3"))


_LOAD_WITHOUT_MGPU_TF = textwrap.dedent("""
    import sys
    sys.modules["mgpu_tf"] = None  # any import of mgpu_tf now fails
    import json, numpy as np, keras
    model = keras.models.load_model(sys.argv[1])
    x = np.load(sys.argv[2])
    model.fit(x, np.zeros((len(x), 1)), epochs=1, verbose=0)  # compiled: it can resume
    print(json.dumps({"class": type(model).__name__, "layers": [l.name for l in model.layers],
                      "prediction": np.load(sys.argv[3]).tolist(),
                      "reloaded": keras.models.load_model(sys.argv[1]).predict(x, verbose=0)
                      .tolist()}))
""")


def test_saved_model_loads_as_plain_keras_without_mgpu_tf(tmp_path):
    x, y = _data(16)
    model = mgpu_tf.ModelParallel(models.mlp(), DEVICES[:2], microbatches=2)
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, batch_size=8, verbose=0)
    model.save(tmp_path / "model.keras")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", model.predict(x, verbose=0))
    script = tmp_path / "load.py"
    script.write_text(_LOAD_WITHOUT_MGPU_TF)
    result = workers.run_python(script, tmp_path / "model.keras", tmp_path / "x.npy",
                                tmp_path / "y.npy")
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["class"] == "Sequential"
    assert loaded["layers"] == ["dense_0", "dense_1", "dense_2", "dense_3"]
    _assert_same_values([loaded["reloaded"]], [loaded["prediction"]])


def _train_script(strategy):
    """The same script for every strategy: no branch on the strategy kind."""
    x, y = _data(32)
    with strategy.scope():
        model = models.mlp()
        model = mgpu_tf.prepare_model(model, strategy)
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    model.fit(x, y, batch_size=8 * strategy.num_replicas_in_sync, epochs=1, shuffle=False,
              verbose=0)
    return model


def test_same_script_runs_under_model_parallel_and_mirrored():
    parallel = _train_script(mgpu_tf.make_strategy("model_parallel", devices=2, microbatches=2))
    assert isinstance(parallel, mgpu_tf.ModelParallel)
    assert [stage.device for stage in parallel.plan] == ["/device:CPU:0", "/device:CPU:1"]
    mirrored = _train_script(mgpu_tf.make_strategy("mirrored", devices=1))
    _assert_same_weights(parallel, mirrored, tolerance.training(4, TERMS))


def test_strategy_is_registered_with_its_options():
    assert "model_parallel" in mgpu_tf.available_strategies()
    strategy = mgpu_tf.make_strategy("model_parallel", devices=["CPU:1", "CPU:3"],
                                     balance="uniform", microbatches=4)
    assert mgpu_tf.strategy_kind(strategy) == "model_parallel"
    assert strategy.num_replicas_in_sync == 1
    model = mgpu_tf.prepare_model(models.mlp(), strategy)
    assert [s.device for s in model.plan] == ["/device:CPU:1", "/device:CPU:3"]
    assert model.microbatches == 4
    assert [len(s.layers) for s in model.plan] == [2, 2]
    assert strategy.prepare_model(model) is model


def test_strategy_hands_datasets_through_whole():
    strategy = mgpu_tf.make_strategy("model_parallel", devices=2)
    dataset = tf.data.Dataset.range(8).batch(4)
    assert strategy.experimental_distribute_dataset(dataset) is dataset
    made = strategy.distribute_datasets_from_function(
        lambda context: dataset.shard(context.num_input_pipelines, context.input_pipeline_id))
    assert [b.numpy().tolist() for b in made] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_jit_compile_compiles_each_stage_on_its_device():
    model = mgpu_tf.ModelParallel(models.mlp(), DEVICES[:2])
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    assert model.jit_compile is False  # the pipeline around the stages stays outside XLA
    stages = model._compiled_stages
    assert len(stages) == len(model.stages.stages) == 2
    assert all(isinstance(f, tf.types.experimental.PolymorphicFunction) for f in stages)


def test_integer_inputs_and_sparse_gradients_train_like_the_reference():
    def build():
        keras.utils.set_random_seed(0)
        return keras.Sequential([keras.Input((5,), dtype="int32"),
                                 keras.layers.Embedding(50, 8, name="embed"),
                                 keras.layers.Flatten(name="flat"),
                                 keras.layers.Dense(1, name="out")])

    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 50, size=(24, 5)).astype("int32"), rng.normal(size=(24, 1))
    reference, model = build(), mgpu_tf.ModelParallel(build(), DEVICES[:2], microbatches=3)
    for m in (reference, model):
        m.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        m.fit(x, y, batch_size=12, epochs=2, shuffle=False, verbose=0)
    embedded = 5 * 8 + 1 + 12  # the Dense over the flat embeddings, back, the batch
    _assert_same_weights(model, reference, tolerance.training(4, embedded, optimizer="adam"))
