"""Pipelines over real graphs: nested models opened, several inputs and outputs, residual
branches and a layer called in two stages, each trained against one device."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from support import compare
from support import tolerance

DEVICES = ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
ROWS, BATCH, EPOCHS = 24, 12, 2
STEPS = EPOCHS * ROWS // BATCH
# The sums behind a gradient of _task(): widths forward (8 features, 16, 20 joined, 16,
# 16 neck, 8 head), as many back, and the batch rows.
TERMS = 2 * (8 + 16 + 20 + 16 + 16 + 8) + BATCH
FIT = tolerance.training(STEPS, TERMS, optimizer="adam")


def _backbone():
    features = keras.Input((8,), name="features")
    side = keras.Input((4,), name="side")
    h = keras.layers.Dense(16, activation="tanh", name="embed")(features)
    a = keras.layers.Dense(16, activation="tanh", name="block_a")(h)
    b = keras.layers.Dense(16, name="block_b")(keras.layers.Concatenate(name="join")([a, side]))
    return keras.Model({"features": features, "side": side},
                       keras.layers.Add(name="residual")([h, b]), name="backbone")


def _task(seed=0):
    """A task model as KerasHub builds one: a nested backbone with two inputs (the second
    read deep inside it), a residual branch, and a head with two outputs."""
    keras.utils.set_random_seed(seed)
    features = keras.Input((8,), name="features")
    side = keras.Input((4,), name="side")
    hidden = _backbone()({"features": features, "side": side})
    neck = keras.layers.Dense(16, activation="tanh", name="neck")(hidden)
    outputs = {"value": keras.layers.Dense(1, name="value")(neck),
               "label": keras.layers.Dense(3, name="label")(neck)}
    return keras.Model({"features": features, "side": side}, outputs, name="task")


def _data():
    rng = np.random.default_rng(0)
    x = {"features": rng.normal(size=(ROWS, 8)).astype("float32"),
         "side": rng.normal(size=(ROWS, 4)).astype("float32")}
    y = {"value": x["features"][:, :1] * x["side"][:, :1],
         "label": (np.abs(x["side"]).argmax(axis=1) % 3).astype("int32")}
    return x, y


def _compile(model, learning_rate=0.01):
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss={"value": "mse", "label": "sparse_categorical_crossentropy"})


def _fit(model, x, y, rows=ROWS):
    return model.fit({k: v[:rows] for k, v in x.items()}, {k: v[:rows] for k, v in y.items()},
                     batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)


def test_the_nested_backbone_is_opened_and_what_crosses_reaches_its_stage():
    model = mgpu_tf.ModelParallel(_task(), DEVICES[:2], balance=[2, 6])
    assert [s.layers for s in model.plan] == [
        ("embed", "block_a"), ("join", "block_b", "residual", "neck", "value", "label")]
    first, second = model.stages.stages
    # The side input goes straight to the second stage; the residual branch and block_a's
    # output leave the first; each is sent once to the device that reads it.
    assert len(first.entering) == 1 and len(first.leaving) == 2 and len(second.entering) == 3
    for name, device in (("embed", "CPU:0"), ("block_b", "CPU:1"), ("label", "CPU:1")):
        layer = model.model.get_layer("backbone").get_layer(name) if name != "label" else (
            model.model.get_layer(name))
        assert all(w.value.device.endswith(device) for w in layer.weights)


@pytest.fixture(scope="module")
def one_device():
    """_task() trained on one device (plain Keras), once: its losses, weights and
    predictions."""
    x, y = _data()
    reference = _task()
    _compile(reference)
    loss = _fit(reference, x, y).history["loss"]
    return {"loss": loss, "weights": reference.get_weights(),
            "predicted": reference.predict(x, verbose=0)}


@pytest.mark.parametrize("microbatches, recompute", [(1, "never"), (3, "except_last")])
def test_nested_two_input_two_output_model_trains_as_on_one_device(microbatches, recompute,
                                                                   one_device):
    x, y = _data()
    model = mgpu_tf.ModelParallel(_task(), DEVICES[:2], balance=[2, 6],
                                  microbatches=microbatches, recompute=recompute)
    _compile(model)
    got = _fit(model, x, y).history["loss"]
    np.testing.assert_allclose(got, one_device["loss"], rtol=FIT)
    assert compare.relative_difference(model.get_weights(), one_device["weights"]) < FIT
    predicted = model.predict(x, batch_size=10, verbose=0)
    assert set(predicted) == {"value", "label"}
    for name in predicted:
        np.testing.assert_allclose(predicted[name], one_device["predicted"][name],
                                   rtol=FIT, atol=FIT)


def test_the_tolerance_rejects_a_wrong_update(one_device):
    x, y = _data()

    def trained(learning_rate=0.01, rows=ROWS):
        model = _task()
        _compile(model, learning_rate)
        _fit(model, x, y, rows)
        return model.get_weights()

    wrong = {"learning rate 1% high": trained(learning_rate=0.0101),
             "one step missing": trained(rows=ROWS - BATCH // 2)}
    assert tolerance.rejects(FIT, one_device["weights"], wrong,
                             compare.relative_difference) == []


def _tied(seed=0):
    """A layer called at the start and at the end, as GPT-2 ties its embedding to its output."""
    keras.utils.set_random_seed(seed)
    x = keras.Input((8,))
    shared = keras.layers.Dense(8, activation="tanh", name="shared")
    h = shared(x)
    for i in range(3):
        h = keras.layers.Dense(8, activation="tanh", name=f"middle_{i}")(h)
    return keras.Model(x, keras.layers.Dense(1, name="out")(shared(h)))


def test_a_layer_called_in_two_stages_keeps_one_variable_and_both_gradients():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(ROWS, 8)).astype("float32"), rng.normal(size=(ROWS, 1))
    reference = _tied()
    model = mgpu_tf.ModelParallel(_tied(), DEVICES[:2], balance=[2, 4], microbatches=2)
    assert [s.layers for s in model.plan] == [("shared", "middle_0"),
                                              ("middle_1", "middle_2", "shared", "out")]
    shared = model.model.get_layer("shared")
    assert all(w.value.device.endswith("CPU:0") for w in shared.weights)  # with its first stage
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    with tf.GradientTape() as reference_tape:
        reference_loss = tf.reduce_mean(tf.square(reference(x, training=True) - y))
    got = tape.gradient(loss, shared.trainable_weights)
    want = reference_tape.gradient(reference_loss, reference.get_layer("shared").trainable_weights)
    bound = tolerance.training(1, 2 * 6 * 8 + ROWS)
    assert compare.relative_difference([g.numpy() for g in got], [w.numpy() for w in want]) < bound
    for m in (reference, model):
        m.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        m.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    fit = tolerance.training(STEPS, 2 * 6 * 8 + BATCH, optimizer="adam")
    assert compare.relative_difference(model.get_weights(), reference.get_weights()) < fit


def test_xla_is_refused_for_a_layer_called_in_two_stages():
    model = mgpu_tf.ModelParallel(_tied(), DEVICES[:2], balance=[2, 4])
    with pytest.raises(ValueError, match=r"layer 'shared' is called by stages 0 and 1 .* lives "
                                         r"with stage 0 on .*CPU:0.*Use jit_compile=False"):
        model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    # Both calls in one stage: nothing crosses, so XLA compiles it.
    whole = mgpu_tf.ModelParallel(_tied(), DEVICES[:2], balance=[5, 1])
    whole.compile(optimizer="sgd", loss="mse", jit_compile=True)


def test_a_saved_nested_model_reloads_in_plain_keras_with_the_same_predictions(tmp_path):
    x, y = _data()
    model = mgpu_tf.ModelParallel(_task(), DEVICES[:2], microbatches=2)
    _compile(model)
    _fit(model, x, y)
    path = str(tmp_path / "task.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert not isinstance(reloaded, mgpu_tf.ModelParallel)
    got, want = model.predict(x, verbose=0), reloaded.predict(x, verbose=0)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


def test_a_layer_holding_most_of_the_model_is_named_in_one_warning():
    class Encoder(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.blocks = [keras.layers.Dense(32, activation="tanh") for _ in range(4)]

        def call(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    x = keras.Input((32,))
    model = keras.Model(x, keras.layers.Dense(1, name="head")(
        Encoder(name="encoder")(keras.layers.Dense(32, name="stem")(x))))
    with pytest.warns(UserWarning) as caught:
        mgpu_tf.ModelParallel(model, DEVICES[:2])
    messages = [str(w.message) for w in caught if "ModelParallel" in str(w.message)]
    assert len(messages) == 1, messages
    # 4 * (32 * 32 + 32) * 4 bytes of 4224 + 4 * 1056 * 4 + 132 = 21,252 bytes.
    assert "layer 'encoder' (Encoder) holds 80% of its bytes (16896 of 21252)" in messages[0]
    assert "Build the model from that layer's blocks with the functional API" in messages[0]


def test_a_subclassed_model_is_refused_in_one_line():
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, x):
            return self.dense(x)

    model = Net()
    model(keras.ops.zeros((1, 3)))
    with pytest.raises(TypeError, match="ModelParallel cuts Sequential and functional") as refused:
        mgpu_tf.ModelParallel(model, DEVICES[:2])
    assert "\n" not in str(refused.value) and "Net" in str(refused.value)


def test_a_model_of_one_subclassed_layer_is_refused_naming_it():
    class Whole(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.inner = keras.layers.Dense(4)

        def call(self, x):
            return self.inner(x)

    x = keras.Input((4,))
    model = keras.Model(x, Whole(name="whole")(x))
    with pytest.raises(ValueError, match="ModelParallel cannot cut Whole 'whole': it is the "
                                         "model's one layer") as refused:
        mgpu_tf.ModelParallel(model, DEVICES[:2])
    assert "\n" not in str(refused.value)


def _masked(seed=0):
    keras.utils.set_random_seed(seed)
    x = keras.Input((6,), dtype="int32")
    embedded = keras.layers.Embedding(20, 8, mask_zero=True, name="embed")(x)
    projected = keras.layers.Dense(8, name="proj")(embedded)
    return keras.Model(x, keras.layers.Dense(1, name="out")(
        keras.layers.GRU(4, name="gru")(projected)))


def test_keras_masks_are_found_on_symbolic_tensors():
    from mgpu_tf.compat import private_graph

    model = _masked()
    assert private_graph.keras_mask(model.get_layer("proj").output) is not None
    assert private_graph.keras_mask(model.get_layer("gru").output) is None


def test_no_cut_drops_a_keras_mask():
    x = np.random.default_rng(0).integers(1, 20, size=(8, 6)).astype("int32")
    x[::2, 3:] = 0  # padding the GRU skips
    model = mgpu_tf.ModelParallel(_masked(), DEVICES[:2])
    assert model.plan[1].layers == ("out",)  # the masked values stay on the first stage
    np.testing.assert_allclose(model(x), _masked()(x), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"The cut after layer 'embed' \(between stage 0 and "
                                         r"stage 1\) would drop the Keras mask of the output "
                                         r"of 'embed'"):
        mgpu_tf.ModelParallel(_masked(), DEVICES[:2], balance=[1, 4])


def test_deferred_batch_norm_inside_a_nested_model_updates_once_from_the_whole_batch():
    keras.utils.set_random_seed(0)
    inner = keras.Sequential([keras.Input((6,)), keras.layers.BatchNormalization(
        momentum=0.8, name="bn"), keras.layers.Dense(8, activation="tanh", name="inner")],
        name="backbone")
    x = keras.Input((6,))
    model = keras.Model(x, keras.layers.Dense(1, name="head")(
        keras.layers.Dense(8, activation="tanh", name="neck")(inner(x))))
    wrapped = mgpu_tf.ModelParallel(model, DEVICES[:2], balance=[2, 2], microbatches=2,
                                    deferred_batch_norm=True)
    assert wrapped.plan[0].layers == ("bn", "inner")
    wrapped.compile(optimizer="sgd", loss="mse")
    rng = np.random.default_rng(0)
    data = (rng.normal(size=(8, 6)) * np.arange(1, 9)[:, None] + 3).astype("float32")
    wrapped.train_on_batch(data, np.zeros((8, 1), "float32"))
    # The statistics of the inputs, whole batch, once: 0.8 * 0 + 0.2 * mean (and 0.8 * 1
    # + 0.2 * biased variance), not two updates from halves.
    bn = inner.get_layer("bn")
    np.testing.assert_allclose(bn.moving_mean.numpy(), 0.2 * data.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(bn.moving_variance.numpy(), 0.8 + 0.2 * data.var(axis=0),
                               rtol=1e-5)
