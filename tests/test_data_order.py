"""The order of each epoch: a function of the seed and the epoch, whatever iterators Keras makes."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.data import order


@pytest.fixture(autouse=True)
def _released():
    # The default strategy is TensorFlow's singleton: its position outlives a test.
    order.position_of(tf.distribute.get_strategy()).release()
    yield
    order.position_of(tf.distribute.get_strategy()).release()


def test_an_iterator_made_before_on_epoch_begin_takes_the_next_epoch():
    position = order.Position()
    reader = order.Reader(position)
    assert reader() == (0, 0)  # nothing drives the position: iterators count
    position.set_epoch(0)
    assert reader() == (0, 0)
    assert reader() == (1, 0)  # made as epoch 0's last step ended
    position.set_epoch(1)
    assert reader() == (2, 0)  # epoch 1 had its iterator already
    position.set_epoch(3)
    assert reader() == (3, 0)
    position.resume_at(5, 7)
    position.set_epoch(5)
    assert reader() == (5, 7)  # a resumed epoch skips the steps done
    assert reader() == (6, 0)
    position.release()
    position.set_epoch(0)
    assert reader() == (0, 0)  # a new fit starts again


def test_each_strategy_holds_its_own_position():
    one = mgpu_tf.make_strategy("one_device")
    other = mgpu_tf.make_strategy("one_device")
    order.position_of(one).set_epoch(2)
    assert order.position_of(one).current() == (2, 0)
    assert order.position_of(other).current() is None
    order.position_of(one).release()


def test_a_model_parallel_position_is_the_one_its_models_report():
    strategy = mgpu_tf.make_strategy("model_parallel", devices=2)
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2),
                                  keras.layers.Dense(1)])
    model = mgpu_tf.prepare_model(model, strategy)
    assert order.position_of(strategy) is order.position_of(model.distribute_strategy)


def test_data_order_keeps_keras_batch_callbacks_asynchronous():
    # Keras dispatches batch callbacks from a thread only when none overrides a batch hook.
    assert (mgpu_tf.callbacks.DataOrder.on_train_batch_end
            is keras.callbacks.Callback.on_train_batch_end)


def _train(strategy_name, callbacks):
    strategy = mgpu_tf.make_strategy(strategy_name)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 3)).astype("float32")
    y = rng.standard_normal((40, 1)).astype("float32")
    data = mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy, 8,
                                 shuffle_seed=4)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.1), "mse")
    model.fit(data, epochs=3, verbose=0, shuffle=False, callbacks=callbacks())
    return model.get_weights()


def test_one_device_sees_the_default_strategys_order():
    reference = _train("default", lambda: [mgpu_tf.callbacks.DataOrder()])
    ordered = _train("one_device", lambda: [mgpu_tf.callbacks.DataOrder()])
    for a, b in zip(reference, ordered):
        np.testing.assert_array_equal(b, a)
    # Without it, the fit tells the data its epochs: Keras' extra iterator under a
    # strategy shifts no epoch's order.
    followed = _train("one_device", lambda: [])
    for a, b in zip(reference, followed):
        np.testing.assert_array_equal(b, a)


def _examples():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((48, 3)).astype("float32")
    y = rng.standard_normal((48, 1)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y))


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    return model


def test_fit_trains_from_one_stream_of_epochs_in_each_epochs_order():
    strategy = mgpu_tf.make_strategy("default")
    data = mgpu_tf.shard_dataset(_examples(), strategy, 8, shuffle_seed=3)
    model = _model()
    model.fit(data, epochs=4, verbose=0, shuffle=False,
              callbacks=[mgpu_tf.callbacks.DataOrder()])
    # One iterator served every epoch: each began as the one before it ended.
    assert type(data).epoch_stream.streams_made == 1

    # Reference: one batch at a time, each epoch from a new iterator made when it begins.
    reference = _model()
    position = order.position_of(strategy)
    for epoch in range(4):
        position.set_epoch(epoch)
        for x, y in mgpu_tf.shard_dataset(_examples(), strategy, 8, shuffle_seed=3):
            reference.train_on_batch(x, y)
    position.release()
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_fits_without_a_callback_stream_and_count_on_from_the_epochs_trained():
    strategy = mgpu_tf.make_strategy("mirrored", devices=1)
    data = mgpu_tf.shard_dataset(_examples(), strategy, 8, shuffle_seed=5)
    with strategy.scope():
        model = _model()
    model.fit(data, epochs=2, verbose=0, shuffle=False)
    model.fit(data, epochs=1, verbose=0, shuffle=False)
    assert type(data).epoch_stream.streams_made == 2
    # Reference: one fit of epochs 0, 1 and 2, each told by DataOrder.
    reference = _model()
    reference.fit(mgpu_tf.shard_dataset(_examples(), mgpu_tf.make_strategy("default"), 8,
                                        shuffle_seed=5),
                  epochs=3, verbose=0, shuffle=False, callbacks=[mgpu_tf.callbacks.DataOrder()])
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    batches = [b[0].shape[0] for b in data]  # a loop of its own: a new iterator each time
    assert batches == [8] * 6 and [b[0].shape[0] for b in data] == batches


def test_the_stream_of_epochs_ends_with_the_fits_last_epoch():
    import threading

    strategy = mgpu_tf.make_strategy("default")
    data = mgpu_tf.shard_dataset(_examples(), strategy, 8, shuffle_seed=3)
    streams = []
    keep = keras.callbacks.LambdaCallback(
        on_train_end=lambda logs: streams.append(type(data).epoch_stream.current()))
    _model().fit(data, epochs=2, verbose=0, shuffle=False,
                 callbacks=[mgpu_tf.callbacks.DataOrder(), keep])
    assert streams[0] is not None and type(data).epoch_stream.current() is None
    left = []
    reader = threading.Thread(target=lambda: left.extend(streams[0]), daemon=True)
    reader.start()
    reader.join(timeout=30)
    # Nothing past epoch 2, and no pipeline waits for an epoch that will not come.
    assert not reader.is_alive() and left == []
