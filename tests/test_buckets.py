"""`bucket_bytes`: gradients all-reduced in buckets, last layers first, during the backward pass.

The worker pair's runs (support.mw_buckets) are checked against the same training
all-reduced at once after the backward pass (which with two workers sums the same two
values, so the weights must be equal) and against one device (support.tolerance); the
communication thread's timeline against the moment the last gradient exists.
"""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.base import options as options_lib
from mgpu_tf.comm import buckets
from support import compare
from support import mw_buckets
from support import mw_equivalence
from support import tolerance
from support import workers


@pytest.mark.parametrize("sizes, bucket_bytes, expected", [
    ([40, 8, 40, 8], 44, [[3, 2], [1, 0]]),
    ([40, 8, 40, 8], 0, [[3, 2, 1, 0]]),
    ([40, 8, 40, 8], 1, [[3], [2], [1], [0]]),
    ([40, 8, 40, 8], 1 << 20, [[3, 2, 1, 0]]),
    ([], 16, []),
])
def test_buckets_hold_the_last_gradients_first(sizes, bucket_bytes, expected):
    assert buckets.backward_buckets(sizes, bucket_bytes) == expected


@pytest.mark.parametrize("value, error, match", [
    (-1, ValueError, "`bucket_bytes` must be at least 0 (0: one all-reduce of every gradient "
     "after the backward pass). Received: bucket_bytes=-1"),
    ("4MB", TypeError, "`bucket_bytes` must be an integer number of bytes. "
     "Received: bucket_bytes='4MB'"),
])
def test_bad_bucket_bytes_fail_at_once(value, error, match):
    with pytest.raises(error, match="^" + re.escape(match)):
        mgpu_tf.make_strategy("multi_worker", bucket_bytes=value)


def test_buckets_are_refused_with_the_sharded_optimizer_state():
    with pytest.raises(ValueError, match=re.escape(
            "`bucket_bytes` cannot be combined with `shard_optimizer_state`")):
        options_lib.parse_options("multi_worker", {"bucket_bytes": 1 << 20,
                                                   "shard_optimizer_state": True})


def test_buckets_apply_to_multi_worker_only():
    with pytest.raises(ValueError, match="`bucket_bytes` does not apply to strategy 'mirrored'"):
        mgpu_tf.make_strategy("mirrored", devices=2, bucket_bytes=1 << 20)


def _one_device(build, problem, batch, learning_rate):
    x, y, weights = problem
    model = build(weights)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate), loss="mse")
    model.fit(mw_equivalence.global_batches(x, y, batch), epochs=1, shuffle=False, verbose=0)
    return model.get_weights()


def _weights(saved, run):
    count = len([k for k in saved.files if k.startswith(run + "/")])
    return [saved[f"{run}/{i}"] for i in range(count)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """The two workers' saved results of support.mw_buckets."""
    out = tmp_path_factory.mktemp("buckets")
    code, outputs = workers.run_workers("-m", 2, "support.mw_buckets", out)
    assert code == 0, f"A worker failed (exit {code}):\n{outputs.get(0, '')[-3000:]}"
    return [np.load(out / f"worker{i}.npz") for i in (0, 1)]


@pytest.mark.multiworker
def test_the_first_bucket_is_sent_before_the_last_gradient_exists(pair):
    for saved in pair:
        timeline, stamps = saved["timeline"], saved["stamps"]
        assert len(stamps) == mw_buckets.STEPS
        per_step = len(timeline) // mw_buckets.STEPS
        assert per_step >= 3 and len(timeline) == per_step * mw_buckets.STEPS
        tickets = timeline[:, 0].astype(int)
        assert list(tickets) == list(range(len(timeline))), "buckets left their order"
        early = 0
        for step, stamp in enumerate(stamps):
            first, last = timeline[step * per_step], timeline[(step + 1) * per_step - 1]
            # (ticket, bytes, enqueued, started, finished)
            early += first[3] < stamp
            assert last[2] >= stamp, f"step {step}: the last bucket left before its gradient"
        # Nothing makes the first bucket wait for the first layer's gradient (buckets sent
        # after the backward pass would overlap no step); how often TensorFlow's scheduler
        # on a loaded machine still runs that gradient first is the benchmark's to count.
        assert early >= 1, f"{early} of {mw_buckets.STEPS} steps overlapped"


def _check_timed_runs(pair):
    """The timed runs: bucketed equal to all at once, and one device's within rounding."""
    problem = mw_buckets.timed_problem()
    single = _one_device(mw_buckets.build_timed, problem, mw_buckets.GLOBAL_BATCH,
                         mw_buckets.LEARNING_RATE)
    assert compare.relative_difference(single, problem[2]) > 1e-3, "the reference did not train"
    terms = mw_buckets.FEATURES + 3 * mw_buckets.WIDTH + 1 + mw_buckets.GLOBAL_BATCH
    bound = tolerance.training(mw_buckets.STEPS, terms)
    for saved in pair:
        assert saved["exchanges/timed_whole"] == 0, "the reference went through buckets"
        bucketed = _weights(saved, "timed")
        for b, w in zip(bucketed, _weights(saved, "timed_whole")):
            np.testing.assert_array_equal(b, w)
        assert compare.relative_difference(bucketed, single) < bound


@pytest.mark.multiworker
def test_buckets_train_as_one_all_reduce_and_as_one_device(pair):
    _check_timed_runs(pair)


@pytest.mark.gpu(2)
@pytest.mark.multiworker
def test_buckets_over_nccl_train_as_one_all_reduce_and_as_one_device(tmp_path):
    code, outputs = workers.run_workers("-m", 2, "support.mw_buckets", tmp_path, "nccl",
                                        env={"CUDA_VISIBLE_DEVICES": ",".join(
                                            str(i) for i in range(len(
                                                tf.config.list_physical_devices("GPU"))))})
    assert code == 0, f"A worker failed (exit {code}):\n{outputs.get(0, '')[-3000:]}"
    enabled = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        _check_timed_runs([np.load(tmp_path / f"worker{i}.npz") for i in (0, 1)])
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(enabled)


@pytest.mark.multiworker
@pytest.mark.parametrize("case", [name for name, _, _ in mw_buckets.CASES])
def test_buckets_keep_the_update_of_each_option(pair, case):
    small = mw_buckets.small_problem()
    bucketed_over_tcp = case != "collectives"
    for saved in pair:
        assert saved[f"exchanges/{case}_whole"] == 0, "the reference went through buckets"
        assert (saved[f"exchanges/{case}"] > 0) == bucketed_over_tcp
        bucketed = _weights(saved, case)
        assert compare.relative_difference(bucketed, small[2]) > 1e-3, "nothing trained"
        for b, w in zip(bucketed, _weights(saved, case + "_whole")):
            np.testing.assert_array_equal(b, w)
    np.testing.assert_array_equal(np.concatenate([w.ravel() for w in _weights(pair[0], case)]),
                                  np.concatenate([w.ravel() for w in _weights(pair[1], case)]))
