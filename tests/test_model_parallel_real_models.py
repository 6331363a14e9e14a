"""Real models as users bring them: ResNet50 and a Transformer encoder, pipelined on 4 devices."""

import time

import keras
import numpy as np
import tensorflow as tf

import mgpu_tf
from support import compare
from support import tolerance

DEVICES = ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]


def _resnet50():
    keras.utils.set_random_seed(0)
    return keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=4)


def _micro_batch_losses(x, y, steps, microbatches):
    """One device, by hand: each micro-batch normalised with its own statistics, SGD on the mean."""
    resnet, optimizer = _resnet50(), keras.optimizers.SGD(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    size, losses = len(x) // microbatches, []
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = tf.add_n([loss_fn(y[i:i + size], resnet(x[i:i + size], training=True))
                             for i in range(0, len(x), size)]) / microbatches
        losses.append(float(loss))
        grads = tape.gradient(loss, resnet.trainable_variables)
        optimizer.apply_gradients(zip(grads, resnet.trainable_variables))
    return losses


def test_resnet50_trains_in_four_stages_with_deferred_batch_norm():
    resnet = _resnet50()
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, size=(8, 32, 32, 3)).astype("float32")
    y = np.arange(8) % 4
    start = time.perf_counter()
    model = mgpu_tf.ModelParallel(resnet, DEVICES, microbatches=2, deferred_batch_norm=True)
    assert [s.device for s in model.plan] == [f"/device:CPU:{k}" for k in range(4)]
    # Eagerly: tracing ResNet50's pipeline takes minutes on 2 cores.
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="sparse_categorical_crossentropy",
                  run_eagerly=True)
    losses = [float(model.train_on_batch(x, y)) for _ in range(2)]
    # The first loss checks the forward pass; the change to the second, the first update.
    # Plain SGD and 4 examples per micro-batch: Adam's first step moves every weight by its
    # learning rate whatever its gradient's size, so gradients at rounding level, such as
    # those through BatchNormalization of 2 examples, would move the weights apart. The
    # change is checked to 5%: one step of this untrained network amplifies rounding.
    want = _micro_batch_losses(x, y, 2, microbatches=2)
    np.testing.assert_allclose(losses[0], want[0], rtol=1e-5)
    np.testing.assert_allclose(losses[1] - losses[0], want[1] - want[0], rtol=0.05)
    # Updated once per step from the whole batch: the first layer's statistics are those of
    # its input, the first convolution of x with the initial weights.
    bn = resnet.get_layer("conv1_bn")
    assert np.all(bn.moving_mean.numpy() != 0)
    # Inference through the pipeline equals the unwrapped model's, with the same weights.
    np.testing.assert_allclose(model(x), resnet(x, training=False), rtol=1e-4, atol=1e-5)
    print(f"resnet50: {time.perf_counter() - start:.1f} s, losses {losses}")


def _encoder(seed=0, vocab=50, length=8, width=16):
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((length,), dtype="int32")
    h = keras.layers.Embedding(vocab, width, name="embed")(tokens)
    for b in range(2):
        attended = keras.layers.MultiHeadAttention(2, width // 2, name=f"attention_{b}")(h, h)
        h = keras.layers.LayerNormalization(name=f"norm_a{b}")(
            keras.layers.Add(name=f"residual_a{b}")([h, attended]))
        fed = keras.layers.Dense(2 * width, activation="relu", name=f"ffn_in{b}")(h)
        fed = keras.layers.Dense(width, name=f"ffn_out{b}")(fed)
        h = keras.layers.LayerNormalization(name=f"norm_f{b}")(
            keras.layers.Add(name=f"residual_f{b}")([h, fed]))
    pooled = keras.layers.GlobalAveragePooling1D(name="pool")(h)
    return keras.Model(tokens, keras.layers.Dense(4, name="classes")(pooled))


# The sums behind a gradient of _encoder(), per block: 16 for each of query, key, value
# and output, 8 for scores and for the weighted sum, 16 and 32 for the feed-forward, 16
# for each LayerNorm; then 8 for pooling and 16 for the classes. As many back, and 16 rows.
ENCODER_FORWARD = 2 * (4 * 16 + 8 + 8 + 16 + 32 + 2 * 16) + 8 + 16
ENCODER_TERMS = 2 * ENCODER_FORWARD + 16
ENCODER_FIT = tolerance.training(4, ENCODER_TERMS)  # 2 epochs of 2 steps


def _fit_encoder(x, y, learning_rate=0.02, rows=32):
    model = _encoder()
    model.compile(optimizer=keras.optimizers.SGD(learning_rate),
                  loss="sparse_categorical_crossentropy")
    model.fit(x[:rows], y[:rows], batch_size=16, epochs=2, shuffle=False, verbose=0)
    return model.get_weights()


def test_encoder_tolerance_rejects_a_wrong_update():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 50, size=(32, 8)).astype("int32")
    y = x[:, 0] % 4
    wrong = {"learning rate 1% high": _fit_encoder(x, y, learning_rate=0.0202),
             "one step missing per epoch": _fit_encoder(x, y, rows=16)}
    assert tolerance.rejects(ENCODER_FIT, _fit_encoder(x, y), wrong,
                             compare.relative_difference) == []


def test_transformer_encoder_balanced_by_time_trains_as_on_one_device():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 50, size=(32, 8)).astype("int32")
    y = x[:, 0] % 4  # learnable from the tokens
    model = mgpu_tf.ModelParallel(_encoder(), DEVICES[:2], balance="time", microbatches=2,
                                  sample=x[:8])
    assert all(s.seconds is not None for s in model.plan)
    assert sum(len(s.layers) for s in model.plan) == len(model.model.layers) - 1  # not Input
    reference = _encoder()
    for m in (model, reference):
        m.compile(optimizer=keras.optimizers.SGD(0.02), loss="sparse_categorical_crossentropy")
    got = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0).history["loss"]
    want = reference.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0).history["loss"]
    assert got[-1] < got[0], got
    np.testing.assert_allclose(got, want, rtol=ENCODER_FIT)
    # SGD: attention's key bias has a zero gradient in exact arithmetic, which Adam would
    # turn into steps of the learning rate in the direction of rounding.
    assert compare.relative_difference(model.get_weights(), reference.get_weights()) < ENCODER_FIT
