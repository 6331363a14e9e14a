"""Balancing: the partitioners minimise the heaviest stage, on valid cuts only."""

import itertools
import logging

import keras
import numpy as np
import pytest

import mgpu_tf
from mgpu_tf.model_parallel import balance
from mgpu_tf.model_parallel import graph as graph_lib
from support import models

DEVICES = ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]


def _brute_force_heaviest(weights, stages):
    best = float("inf")
    for cuts in itertools.combinations(range(1, len(weights)), stages - 1):
        bounds = (0,) + cuts + (len(weights),)
        best = min(best, max(sum(weights[a:b]) for a, b in zip(bounds, bounds[1:])))
    return best


@pytest.mark.parametrize("seed", range(20))
def test_partition_minimises_the_heaviest_stage(seed):
    rng = np.random.default_rng(seed)
    weights = [int(w) for w in rng.integers(0, 100, size=rng.integers(2, 9))]
    stages = int(rng.integers(1, len(weights) + 1))
    counts = balance.partition(weights, stages)
    assert len(counts) == stages and min(counts) >= 1 and sum(counts) == len(weights)
    bounds = np.cumsum([0] + counts)
    heaviest = max(sum(weights[a:b]) for a, b in zip(bounds, bounds[1:]))
    assert heaviest == _brute_force_heaviest(weights, stages)


def test_uniform_balances_layer_counts():
    model = mgpu_tf.ModelParallel(models.mlp((4,) * 6), DEVICES[:3], balance="uniform")
    assert [len(s.layers) for s in model.plan] == [2, 2, 2]


def test_params_balances_parameter_bytes():
    # dense_0: 8*256+256, dense_1: 256*4+4, then three 4->4 layers: one heavy layer.
    model = mgpu_tf.ModelParallel(models.mlp((256, 4, 4, 4, 4)), DEVICES[:2], balance="params")
    assert model.plan[0].layers == ("dense_0",)
    assert model.plan[0].param_bytes == (8 * 256 + 256) * 4
    assert sum(s.param_bytes for s in model.plan) == sum(
        w.numpy().nbytes for w in model.weights)


def test_time_balances_measured_time_and_reports_it():
    model = mgpu_tf.ModelParallel(models.mlp((1024, 1024, 4, 4, 4, 4), inputs=1024), DEVICES[:2],
                                  balance="time", sample=np.ones((512, 1024), "float32"))
    uniform = mgpu_tf.ModelParallel(models.mlp((1024, 1024, 4, 4, 4, 4), inputs=1024), DEVICES[:2],
                                    balance="uniform")
    assert [len(s.layers) for s in uniform.plan] == [3, 3]
    # The two 1024-wide layers carry nearly all the time (a batch of 512 keeps the small
    # layers' call overhead far below it, even on a loaded machine): they get split apart.
    assert model.plan[0].layers == ("dense_0",)
    assert all(np.isfinite(s.seconds) and s.seconds > 0 for s in model.plan)


def _waiting(seconds_per_row):
    """Wait layers of known cost: seconds for each row, forward only, no weights."""
    x = keras.Input((4,))
    y = x
    for i, seconds in enumerate(seconds_per_row):
        y = models.Wait(seconds, name=f"wait_{i}")(y)
    return keras.Model(x, y)


def _check_time_plan(model, costs, stages):
    """The plan of `model` against layer costs known in advance (seconds).

    The heaviest stage by known cost is the least any split allows (brute force), and
    each stage's measured seconds hold its known waits, which never end early (how much
    more a loaded machine adds is not asserted).
    """
    counts = [len(s.layers) for s in model.plan]
    bounds = np.cumsum([0] + counts)
    known = [sum(costs[a:b]) for a, b in zip(bounds, bounds[1:])]
    assert max(known) == pytest.approx(_brute_force_heaviest(costs, stages)), counts
    for stage, cost in zip(model.plan, known):
        assert cost <= stage.seconds, (stage, cost)


def test_time_puts_the_costly_layer_alone():
    # Per row: 50, 5, 5 and 30 ms for a sample of one row. Uniform would cut [2, 2]
    # and params (no weights at all) has nothing to go by; time must cut [1, 3].
    per_row = [50e-3, 5e-3, 5e-3, 30e-3]
    model = mgpu_tf.ModelParallel(_waiting(per_row), DEVICES[:2], balance="time",
                                  sample=np.ones((1, 4), "float32"))
    assert model.plan[0].layers == ("wait_0",)
    _check_time_plan(model, per_row, 2)


def test_time_without_sample_times_32_rows_of_zeros():
    # 32 rows of the given per-row waits: 48, 16, 16, 32, 16 ms. Best over 3 stages:
    # [48 | 16, 16 | 32, 16]; every other cut has a stage of 64 ms, a margin no load
    # turns into a tie (equal waits made [48 | 16, 16, 16 | 16] as good).
    per_row = [1.5e-3, 0.5e-3, 0.5e-3, 1.0e-3, 0.5e-3]
    model = mgpu_tf.ModelParallel(_waiting(per_row), DEVICES[:3], balance="time")
    assert [len(s.layers) for s in model.plan] == [1, 2, 2]
    _check_time_plan(model, [32 * s for s in per_row], 3)


def test_explicit_balance_is_used_as_given():
    model = mgpu_tf.ModelParallel(models.mlp(), DEVICES[:2], balance=[1, 3])
    assert [s.layers for s in model.plan] == [("dense_0",), ("dense_1", "dense_2", "dense_3")]
    assert [s.device for s in model.plan] == ["/device:CPU:0", "/device:CPU:1"]
    assert all(s.seconds is None for s in model.plan)


def test_automatic_balance_may_cut_where_several_tensors_cross():
    graph = graph_lib.flatten(models.residual())
    # stem, block_a, block_b, add (stem + block_b), head
    assert [u.name for u in graph.units] == ["stem", "block_a", "block_b", "add", "head"]
    assert graph.crossing_names(1) == ("stem", "block_a")
    # Bytes 576, 1088, 1088, 0, 68: the lightest heaviest stage of three cuts the block.
    model = mgpu_tf.ModelParallel(models.residual(), DEVICES[:3], balance="params")
    assert [s.layers for s in model.plan] == [
        ("stem",), ("block_a",), ("block_b", "add", "head")]
    # The stem's output goes from the first device straight to the third, not through the second.
    assert [len(s.entering) for s in model.stages.stages] == [1, 1, 2]


def test_nested_model_is_opened_into_its_layers():
    keras.utils.set_random_seed(0)
    block = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, name="inner_0"),
                              keras.layers.Dense(8, name="inner_1")], name="block")
    x = keras.Input((8,))
    model = keras.Model(x, keras.layers.Dense(1, name="out")(block(x)))
    wrapped = mgpu_tf.ModelParallel(model, DEVICES[:2], balance=[1, 2])
    assert [s.layers for s in wrapped.plan] == [("inner_0",), ("inner_1", "out")]
    for layer, device in (("inner_0", "CPU:0"), ("inner_1", "CPU:1")):
        for variable in block.get_layer(layer).weights:
            assert variable.value.device.endswith(device)


def test_plan_prints_one_line_per_stage():
    model = mgpu_tf.ModelParallel(models.mlp(), DEVICES[:2], balance="uniform")
    text = [str(s) for s in model.plan]
    assert text[0].startswith("stage 0 on /device:CPU:0: 2 layers (dense_0 .. dense_1)")


def test_the_cut_is_logged_in_one_line(caplog):
    # Bytes of dense_0..3 (8 inputs, float32): (8*16+16)*4, (16*16+16)*4 twice, (16+1)*4 =
    # 576, 1088, 1088, 68; the lightest heaviest stage of two is 576+1088 | 1088+68.
    with caplog.at_level(logging.INFO, logger="mgpu_tf"):
        model = mgpu_tf.ModelParallel(models.mlp(), DEVICES[:2], microbatches=4)
    lines = [r.getMessage() for r in caplog.records if "ModelParallel cut" in r.getMessage()]
    assert lines == [
        f"mgpu_tf: ModelParallel cut {model.model.name!r} into 2 stages (balance='params', "
        "4 micro-batches): 2 + 2 layers on /device:CPU:0, /device:CPU:1, 1664 + 1156 bytes."]
