"""The planner counts a pipeline's activations under recompute, and recommends recomputing."""

import keras
import numpy as np
import pytest

import mgpu_tf
from mgpu_tf.planner import memory as memory_lib

ROWS, WIDTH, LAYERS = 256, 64, 8


def _stack(batch_norm=False):
    keras.utils.set_random_seed(0)
    layers = [keras.Input((WIDTH,))]
    for i in range(LAYERS):
        layers.append(keras.layers.Dense(WIDTH, activation="tanh", name=f"d{i}"))
        if batch_norm and i == 0:
            layers.append(keras.layers.BatchNormalization(name="bn"))
    return keras.Sequential(layers + [keras.layers.Dense(1, name="out")])


@pytest.fixture(scope="module")
def memory():
    return memory_lib.measure_model(_stack())


def test_recompute_keeps_the_stage_input_and_one_microbatch(memory):
    never = memory.footprints(ROWS, 2, 0, "never", 8)
    kept = memory.footprints(ROWS, 2, 0, "except_last", 8)
    assert [f.activations for f in memory.footprints(ROWS, 2, 0)] == \
        [f.activations for f in never]  # micro-batches alone keep every activation
    per_row = WIDTH * 4  # a float32 row of a hidden layer: what enters the second stage
    rows = ROWS // 8
    for k in range(2):
        # At least one saved tensor per layer per example when kept; the input of the
        # stage for the batch plus that for one micro-batch when recomputing.
        assert never[k].activations >= 4 * per_row * ROWS
        assert kept[k].activations <= per_row * ROWS + never[k].activations * rows / ROWS * 1.01
        assert kept[k].activations >= per_row * ROWS
    assert memory.footprints(ROWS, 2, 0, "always", 8) == kept
    assert memory.footprints(ROWS, 2, 0, "except_last", 1) == never  # the last is not recomputed


def test_plan_recommends_recompute_when_activations_do_not_fit(memory):
    never = memory.footprints(ROWS, 2, 2)
    kept = memory.footprints(ROWS, 2, 2, "except_last", 2)
    budget = (max(f.total for f in never) + max(f.total for f in kept)) // 2
    model = _stack(batch_norm=True)
    result = mgpu_tf.plan(model, devices=2, device_memory=budget, global_batch_size=ROWS,
                          measure_compute=False)
    best = result.recommended
    assert best.name == "model" and best.fits
    assert best.options["recompute"] == "except_last"
    assert best.options["microbatches"] >= 2
    assert best.options["deferred_batch_norm"] is True
    assert "recompute='except_last'" in result.reason
    assert "deferred_batch_norm=True" in result.reason
    strategy = mgpu_tf.make_strategy(best.strategy, **best.options)
    wrapped = mgpu_tf.prepare_model(model, strategy)
    assert (wrapped.recompute, wrapped.deferred_batch_norm) == ("except_last", True)
    # With room for every activation, nothing is recomputed.
    roomy = mgpu_tf.plan(_stack(), devices=2, device_memory=budget * 4, global_batch_size=ROWS,
                         measure_compute=False)
    assert all("recompute" not in o.options for o in roomy.options)


def test_plan_counts_the_recompute_mode_it_is_given(memory):
    result = mgpu_tf.plan(_stack(), devices=2, device_memory="1GiB", global_batch_size=ROWS,
                          recompute="always", microbatches=4, measure_compute=False)
    model_option = next(o for o in result.options if o.name == "model")
    assert model_option.footprints == tuple(memory.footprints(ROWS, 2, 2, "always", 4))
    with pytest.raises(ValueError, match=r"`recompute` must be one of never, except_last, "
                                         r"always\. Received: recompute='some'"):
        mgpu_tf.plan(_stack(), devices=2, global_batch_size=8, recompute="some")


def test_stage_footprints_count_each_variable_once_and_a_micro_batch_per_activation():
    from mgpu_tf.planner import stages as stages_lib
    from support import models

    x = np.ones((64, 8), "float32")
    whole = models.residual()
    total = sum(w.numpy().nbytes for w in whole.weights)
    footprints = {}
    for microbatches, recompute in ((1, "never"), (4, "never"), (4, "always")):
        model = mgpu_tf.ModelParallel(models.residual(), ["CPU:0", "CPU:1"], balance=[2, 3],
                                      microbatches=microbatches, recompute=recompute)
        footprints[microbatches, recompute] = stages_lib.stage_footprints(model, x, slots=2)
    one = footprints[1, "never"]
    assert sum(f.params for f in one) == total
    assert [f.optimizer for f in one] == [2 * f.gradients for f in one]
    # Each stage keeps at least two tensors of 64 rows of 16 float32: the outputs of stem
    # and block_a on the first; what enters the second (stem's, block_a's) and the head's input.
    assert one[0].activations >= 2 * 64 * 16 * 4 and one[1].activations >= 3 * 64 * 16 * 4
    # Four micro-batches of 16 rows keep what one batch of 64 keeps; recomputing, the
    # stage keeps one micro-batch's and the inputs of the other three.
    split = footprints[4, "never"]
    assert [f.activations for f in split] == [f.activations for f in one]
    assert all(r.activations < s.activations for r, s in zip(footprints[4, "always"], split))
