"""The accessors of TensorFlow's collective launchers: what they find, and the clear error.

What an all-to-all delivers across two real workers is checked in test_sharded_state.py
(`test_an_all_to_all_sends_row_j_to_replica_j`), where the workers run.
"""

import json
import re
import types

import numpy as np
import pytest
import tensorflow as tf

from mgpu_tf.compat import private_collectives, versions
from mgpu_tf.compat.private_collectives import PrivateNameError
from support import mw_keys, workers


def _missing(name, received):
    known = versions.KNOWN[name]
    return re.escape(f"{known.purpose} through TensorFlow's private `{name}`, which ") + (
        r".* does not have \(" + re.escape(known.text()) + r" do\)\. Received: "
        + re.escape(received))


def test_the_launchers_are_the_multi_worker_strategys_own():
    # Built on TensorFlow's classes as MultiWorkerMirroredStrategy builds them, without
    # starting one (which would take this session's collective runtime).
    from tensorflow.python.distribute import collective_util, cross_device_ops

    ops = cross_device_ops.CollectiveAllReduce(
        devices=["/job:localhost/replica:0/task:0/device:CPU:0"], group_size=2,
        options=collective_util.Options())
    extended = types.SimpleNamespace(_cross_device_ops=ops)
    strategy = types.SimpleNamespace(name="s", extended=extended)
    launchers = private_collectives.collective_launchers(strategy)
    assert len(launchers) == 1
    assert private_collectives.device(launchers[0]).endswith("device:CPU:0")


def test_a_strategy_without_collective_launchers_gets_the_clear_error():
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0"], cross_device_ops=tf.distribute.ReductionToOneDevice())
    with pytest.raises(PrivateNameError, match=_missing(
            "CollectiveAllReduce._launchers", "strategy=<MirroredStrategy>")):
        private_collectives.collective_launchers(strategy)


def test_a_launcher_without_the_names_gets_the_clear_error():
    bare = types.SimpleNamespace(name="thing")
    with pytest.raises(PrivateNameError, match=_missing(
            "CollectiveReplicaLauncher._next_instance_key", "launcher=<SimpleNamespace 'thing'>")):
        private_collectives.all_to_all(bare, tf.zeros([2, 1]))


def _launcher():
    from tensorflow.python.distribute import collective_util, cross_device_ops

    ops = cross_device_ops.CollectiveAllReduce(
        devices=["/job:localhost/replica:0/task:0/device:CPU:0"], group_size=2,
        options=collective_util.Options())
    strategy = types.SimpleNamespace(extended=types.SimpleNamespace(_cross_device_ops=ops))
    return private_collectives.collective_launchers(strategy)[0]


def test_instance_keys_are_unique_per_call_unless_set_otherwise():
    launcher = _launcher()
    first = private_collectives.next_instance_key(launcher)
    assert isinstance(first, int)
    assert private_collectives.unique_instance_keys(launcher) is True
    try:
        private_collectives.set_unique_instance_keys(launcher, False)
        assert private_collectives.unique_instance_keys(_launcher()) is False
    finally:
        private_collectives.set_unique_instance_keys(launcher, True)
    assert private_collectives.unique_instance_keys(launcher) is True


@pytest.mark.multiworker
def test_a_function_called_in_keeping_keys_takes_its_instance_keys_once(tmp_path):
    """TensorFlow keeps a record per instance key (docs/benchmarks.md, "Soak"): a function
    called every step must not take a new one each call, and must still sum right."""
    code, outputs = workers.run_workers(mw_keys.__file__, 2, grace_seconds=1)
    assert code == 0, outputs
    for index in (0, 1):
        # The launcher interleaves a worker's standard output and error as lines arrive.
        [line] = [line for line in outputs[index].splitlines() if line.startswith('{"plain"')]
        run = json.loads(line)
        assert run["plain"] == mw_keys.CALLS  # TensorFlow's default: a key per call
        assert run["kept"] == 1  # taken when traced
        assert run["sums"] == [3.0] * mw_keys.CALLS  # replica 0 adds 1, replica 1 adds 2
        assert run["unique"] is True  # the block restored TensorFlow's default


def _keys_taken(launcher, run):
    before = private_collectives.next_instance_key(launcher)
    run()
    return private_collectives.next_instance_key(launcher) - before


def test_a_mirrored_fit_takes_its_instance_keys_when_traced_and_trains_as_one_device():
    """Under TensorFlow's default a mirrored step takes a new key per collective per call,
    and the runtime keeps a record of each: 1.6 MB per 1,000 steps (docs/benchmarks.md,
    "Soak"). One process' replicas trace together, so the toolkit's steps keep theirs."""
    import keras

    import mgpu_tf

    x = np.linspace(-1.0, 1.0, 64 * 4, dtype="float32").reshape(64, 4)
    y = np.sin(x.sum(axis=1, keepdims=True))
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    launcher = private_collectives.collective_launchers(strategy)[0]

    def model():
        keras.utils.set_random_seed(5)
        built = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                                  keras.layers.Dense(1)])
        built.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        return built

    @tf.function
    def plain_all_reduce():  # TensorFlow's default: the counter moves at every call
        return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(
            "sum", tf.constant(1.0)))

    assert _keys_taken(launcher, lambda: [plain_all_reduce() for _ in range(5)]) >= 5
    with strategy.scope():
        mirrored = model()
    first = _keys_taken(launcher, lambda: mirrored.fit(x, y, batch_size=16, epochs=1,
                                                       verbose=0, shuffle=False))
    assert first > 0  # traced: the gradients' all-reduce took its keys
    assert _keys_taken(launcher, lambda: mirrored.fit(x, y, batch_size=16, epochs=3,
                                                      verbose=0, shuffle=False)) == 0
    evaluate = lambda: mirrored.evaluate(x, y, batch_size=16, verbose=0)  # noqa: E731
    _keys_taken(launcher, evaluate)
    assert _keys_taken(launcher, evaluate) == 0
    alone = model()
    alone.fit(x, y, batch_size=16, epochs=4, verbose=0, shuffle=False)
    np.testing.assert_allclose(np.concatenate([w.ravel() for w in mirrored.get_weights()]),
                               np.concatenate([w.ravel() for w in alone.get_weights()]),
                               rtol=1e-5, atol=1e-6)
