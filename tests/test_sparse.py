"""Sparse gradients (an Embedding's `tf.IndexedSlices`) reach the optimizer as on one device.

Keras applies a sparse gradient row by row, each occurrence of a row on its own (Adam's
second moment adds each occurrence's square), so a gradient summed densely on its way
changes the update. The reference is plain Keras on one device on the same global batches
(with `steps_per_sync=k`, batches k times as large: one update of the same examples), within
`support.tolerance`'s bound; the two workers (support.mw_sparse) run once for every case.
"""

import pickle
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.comm import compression
from mgpu_tf.comm import sparse
from support import compare
from support import mw_sparse
from support import tolerance
from support import workers
from test_ring import _run_ring

# Embedding (rows, width 4), mean over 6 positions, Dense to 3, back; plus the batch rows.
TERMS = 6 + 4 + 3 + 3 + 4 + 6
_GAIN = {"sgd_momentum": "momentum", "lion": "sgd"}


def _reference(initial, optimizer, data, batch_size, build=mw_sparse.build):
    model = build()
    model.set_weights(initial)
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = data
    model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
    return [np.asarray(w) for w in model.get_weights()]


def _bound(optimizer, option, steps=mw_sparse.STEPS):
    rows = mw_sparse.GLOBAL_BATCH * (2 if option == "steps_per_sync" else 1)
    dtype = "float16" if option in ("float16", "bfloat16") else "float32"
    if option == "bfloat16":  # 8 bits of mantissa: float16's bound times 2**3
        return 8 * tolerance.training(steps, TERMS + rows, optimizer="adam", dtype=dtype)
    return tolerance.training(steps, TERMS + rows, optimizer=_GAIN.get(optimizer, "adam"),
                              dtype=dtype)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Both workers' results of support.mw_sparse: `[{run: result}, {run: result}]`."""
    out = tmp_path_factory.mktemp("sparse")
    code, outputs = workers.run_workers("-m", 2, "support.mw_sparse", out)
    assert code == 0, "\n".join(f"[{i}] {text[-3000:]}" for i, text in outputs.items())
    return [pickle.loads((out / f"worker{i}.pkl").read_bytes()) for i in (0, 1)]


@pytest.mark.multiworker
def test_auto_takes_the_tcp_ring_between_these_workers(pair):
    assert [p["transport"] for p in pair] == ["tcp", "tcp"]


def _refused(optimizer, option):
    """shard_optimizer_state refuses a sparse gradient for an optimizer that updates it row by
    row (comm/sharded_state.py): the sliced sum would change the update."""
    return option == "sharded" and optimizer not in ("sgd_momentum", "lion")


def _runs(refused):
    return [pytest.param(*run, id="-".join(run)) for run in mw_sparse.RUNS
            if _refused(*run) == refused]


_REFERENCES = {}


def _embedding_reference(initial, optimizer, batch):
    """One device's weights, made once for each optimizer and batch size."""
    key = (optimizer, batch)
    if key not in _REFERENCES:
        _REFERENCES[key] = (initial, _reference(initial, mw_sparse.make_optimizer(optimizer),
                                                mw_sparse.problem(), batch))
    started, expected = _REFERENCES[key]
    assert compare.relative_difference(initial, started) == 0.0
    return expected


@pytest.mark.multiworker
@pytest.mark.parametrize("optimizer, option", _runs(False))
def test_an_embedding_trains_on_two_workers_as_on_one_device(pair, optimizer, option):
    first, second = (p[(optimizer, option)] for p in pair)
    assert first["error"] is None, first["error"]
    assert compare.relative_difference(first["weights"], second["weights"]) == 0.0
    batch = mw_sparse.GLOBAL_BATCH * (2 if option == "steps_per_sync" else 1)
    expected = _embedding_reference(first["initial"], optimizer, batch)
    difference = compare.relative_difference(first["weights"], expected)
    bound = _bound(optimizer, option)
    assert difference < bound, f"weights differ by {difference:.2e} (bound {bound:.2e})"


@pytest.mark.multiworker
@pytest.mark.parametrize("optimizer, option", _runs(True))
def test_sharded_state_refuses_a_sparse_gradient_it_would_update_otherwise(pair, optimizer,
                                                                           option):
    first, second = (p[(optimizer, option)] for p in pair)
    assert first["error"] is not None and first["error"].startswith(
        "shard_optimizer_state sums a sparse gradient (tf.IndexedSlices, an Embedding's) into "
        "each replica's slice"), first["error"]
    assert second["error"] == first["error"]


@pytest.mark.multiworker
def test_a_keras_hub_bert_classifier_trains_on_two_workers_as_on_one_device(pair):
    first, second = pair[0]["bert"], pair[1]["bert"]
    assert compare.relative_difference(first["weights"], second["weights"]) == 0.0
    expected = _reference(first["initial"], keras.optimizers.Adam(1e-2),
                          mw_sparse.bert_problem(), mw_sparse.GLOBAL_BATCH,
                          build=lambda: mw_sparse.as_functional(mw_sparse.build_bert()))
    difference = compare.relative_difference(first["weights"], expected)
    # Widths 16 and 32 forward and back through one block, attention over 8 positions.
    bound = tolerance.training(mw_sparse.BERT_STEPS, 2 * (16 + 32 + 16 + 8) + 8,
                               optimizer="adam")
    assert difference < bound, f"weights differ by {difference:.2e} (bound {bound:.2e})"


@pytest.mark.parametrize("size, lengths", [(2, [3, 5]), (3, [0, 7, 2]), (1, [4])])
def test_payloads_of_any_length_are_gathered_in_rank_order(size, lengths):
    payloads = [np.arange(n, dtype=np.uint8) + 10 * rank for rank, n in enumerate(lengths)]
    results, errors = _run_ring(
        size, lambda r, rank: sparse.all_gather_bytes(r, payloads[rank], op=7))
    assert errors == [None] * size
    for result in results:
        assert [list(p) for p in result] == [list(p) for p in payloads]


def test_a_sparse_gradient_goes_to_the_gather_and_stays_sparse():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2)
    table = tf.Variable(tf.zeros([5, 2]))
    kernel = tf.Variable(tf.zeros([2]))
    seen = {}

    def gather(slices):
        seen["gather"] = slices
        return sparse.collective_all_gather_slices(slices)

    def total(grads):
        seen["total"] = grads
        return tf.distribute.get_replica_context().all_reduce("sum", grads)

    def step():
        rows = tf.IndexedSlices(tf.ones([3, 2]), tf.constant([1, 1, 4]), tf.constant([5, 2]))
        out = compression.sum_gradients([(rows, table), (tf.ones([2]), kernel)], total,
                                        dense=True, gather=gather)
        return out[0][0].indices, out[0][0].values, out[1][0]

    result = tf.function(lambda: strategy.run(step))()
    indices, values, summed = (strategy.experimental_local_results(t)[0] for t in result)
    assert list(indices.numpy()) == [1, 1, 4, 1, 1, 4]  # every replica's rows, none summed
    np.testing.assert_array_equal(values.numpy(), np.ones([6, 2]))
    np.testing.assert_array_equal(summed.numpy(), [2.0, 2.0])
    assert len(seen["gather"]) == 1 and len(seen["total"]) == 1


def _mirrored(optimizer, **options):
    strategy = mgpu_tf.make_strategy("mirrored", devices=2, **options)
    with strategy.scope():
        model = mw_sparse.build()
        initial = [np.asarray(w) for w in model.get_weights()]
        model.compile(optimizer=mw_sparse.make_optimizer(optimizer),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = mw_sparse.problem()
    model.fit(mgpu_tf.shard_dataset(tf.data.Dataset.from_tensor_slices((x, y)), strategy,
                                    mw_sparse.GLOBAL_BATCH), epochs=1, verbose=0)
    return initial, [np.asarray(w) for w in model.get_weights()]


def test_accumulated_rows_give_one_update_of_the_same_examples_under_mirrored():
    initial, weights = _mirrored("adam", steps_per_sync=2)
    expected = _embedding_reference(initial, "adam", 2 * mw_sparse.GLOBAL_BATCH)
    difference = compare.relative_difference(weights, expected)
    bound = _bound("adam", "steps_per_sync")
    assert difference < bound, f"weights differ by {difference:.2e} (bound {bound:.2e})"


def test_sharded_state_refuses_a_summed_sparse_gradient_under_mirrored():
    with pytest.raises(ValueError, match=re.escape(
            "shard_optimizer_state sums a sparse gradient (tf.IndexedSlices, an Embedding's) "
            "into each replica's slice, and Adam updates")):
        _mirrored("adam", shard_optimizer_state=True)
