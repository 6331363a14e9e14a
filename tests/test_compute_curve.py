"""Compute curves of adaptive shares: fits against hand-computed lines, and the greedy split
against every split tried."""

import itertools

import numpy as np
import pytest

from mgpu_tf.data.adaptive import compute_curve
from mgpu_tf.data.adaptive.compute_curve import Curve


def test_a_fit_through_two_sizes_is_the_line_through_them():
    curve = compute_curve.fit({1000: 0.03, 2000: 0.05})
    assert curve.fixed == pytest.approx(0.01) and curve.per_example == pytest.approx(2e-5)
    assert curve(1500) == pytest.approx(0.04)


def test_one_size_gives_a_proportional_curve():
    assert compute_curve.fit({1024: 0.049}) == Curve(0.0, 0.049 / 1024)


def test_a_curve_never_falls_with_the_size():
    # Noise made 1152 examples faster than 1024: flat at their mean.
    curve = compute_curve.fit({1024: 0.0349, 1152: 0.0324})
    assert curve.per_example == 0.0 and curve.fixed == pytest.approx(0.03365)


def test_a_curve_has_no_negative_fixed_part():
    # The line through both (4e-5 a example, -0.03 fixed) is cut to 1e-5, the lower
    # seconds per example; the fixed part is the mean of 0 and 0.05 - 0.02.
    curve = compute_curve.fit({1000: 0.01, 2000: 0.05})
    assert curve.per_example == pytest.approx(1e-5) and curve.fixed == pytest.approx(0.015)


def test_bounds_move_each_unit_by_a_factor_of_one_and_a_half_at_most():
    assert compute_curve.bounds((0.5, 0.5), 16, 0.5) == ([5, 5], [12, 12])
    assert compute_curve.bounds((9, 7), 16, 0.5) == ([6, 5], [14, 11])  # 10.5 rounds up
    assert compute_curve.bounds((1, 1, 1), 16, float("inf")) == ([1, 1, 1], [14, 14, 14])


def _sizes(grains):
    return tuple(128 * g for g in grains)


@pytest.mark.parametrize("seed", range(20))
def test_the_greedy_split_is_as_fast_as_the_best_of_every_split(seed):
    rng = np.random.default_rng(seed)
    curves = [Curve(rng.uniform(0, 0.02), rng.uniform(0, 5e-5)) for _ in range(3)]
    now = tuple(int(g) for g in rng.multinomial(13, [1 / 3] * 3) + 1)
    low, high = compute_curve.bounds(now, 16, 0.5)
    got = compute_curve.best_grains(curves, _sizes, 16, low, high, now)
    splits = [s for s in itertools.product(range(1, 15), repeat=3) if sum(s) == 16
              and all(lo <= g <= hi for g, lo, hi in zip(s, low, high))]
    best = min(compute_curve.step_seconds(_sizes(s), curves) for s in splits)
    assert got in splits
    assert compute_curve.step_seconds(_sizes(got), curves) == pytest.approx(best)


def test_equal_predictions_keep_the_split_where_it_is():
    flat = [Curve(0.03, 0.0)] * 2
    assert compute_curve.best_grains(flat, _sizes, 16, [1, 1], [15, 15], (9, 7)) == (9, 7)
