"""Each unit's compute per step against its examples: a fixed part and a part per example.

`mgpu_tf.data.settle` fits one `Curve` per unit to the sizes a run has measured and
predicts the step of other sizes from it; `best_grains` splits the grains so that the
slowest unit is as fast as the curves allow.

Design: docs/design.md#adaptive-shard-weights
"""

import dataclasses
import math

import numpy as np

__all__ = ["Curve", "fit", "step_seconds", "best_grains", "bounds"]


@dataclasses.dataclass(frozen=True)
class Curve:
    """Seconds of compute for `size` examples: `fixed + per_example * size`."""

    fixed: float
    per_example: float

    def __call__(self, size):
        return self.fixed + self.per_example * size


def fit(points):
    """The `Curve` through `points` (`{examples: seconds}`), least squares.

    One size gives a proportional curve. A curve never falls with the size and its fixed
    part is never negative (its slope is at most any point's seconds per example), so
    noise between two close sizes cannot make more examples look cheaper.

    Example:

    ```python
    fit({1024: 0.049})  # Curve(fixed=0.0, per_example=4.785e-05)
    fit({1024: 0.0349, 1152: 0.0324})  # Curve(fixed=0.03365, per_example=0.0): flat
    ```
    """
    sizes = np.array(sorted(points), np.float64)
    seconds = np.array([points[s] for s in sorted(points)], np.float64)
    steepest = float(np.min(seconds / sizes))
    if len(sizes) == 1:
        return Curve(0.0, steepest)
    slope = float(np.polyfit(sizes, seconds, 1)[0])
    slope = min(max(slope, 0.0), steepest)
    return Curve(float(np.mean(seconds - slope * sizes)), slope)


def step_seconds(sizes, curves):
    """Compute of a step: its slowest unit's, each unit with `sizes[u]` examples."""
    return max(curve(size) for curve, size in zip(curves, sizes))


def bounds(grains, count, max_change):
    """Each unit's fewest and most grains when `grains` (any positive scale) may move by a
    factor of `1 + max_change` at most; at least one grain each."""
    most = count - len(grains) + 1
    if math.isinf(max_change):
        return [1] * len(grains), [most] * len(grains)
    total = float(sum(grains))
    quotas = [count * g / total for g in grains]
    low = [max(1, math.floor(q / (1.0 + max_change) + 0.5)) for q in quotas]
    high = [min(most, math.floor(q * (1.0 + max_change) + 0.5)) for q in quotas]
    if sum(low) > count or sum(high) < count:
        return [1] * len(grains), [most] * len(grains)
    return low, [max(h, lo) for h, lo in zip(high, low)]


def best_grains(curves, sizes_of, count, low, high, now):
    """The split of `count` grains, each unit within `[low, high]`, whose slowest unit's
    predicted compute is least.

    Grains go one at a time to the unit that stays fastest with one more (optimal for
    curves that never fall); a tie goes to a unit below its grains `now`, so that equal
    predictions keep the split where it is.

    Args:
        curves: one `Curve` per unit.
        sizes_of: grains of every unit -> examples of every unit.
        count: grains to split.
        low, high: each unit's fewest and most grains.
        now: each unit's grains now (any scale).

    Returns:
        A tuple of grains, one per unit.
    """
    total = float(sum(now))
    quotas = [count * g / total for g in now]
    grains = list(low)
    for _ in range(count - sum(grains)):
        def after(u):
            trial = grains[:u] + [grains[u] + 1] + grains[u + 1:]
            return curves[u](sizes_of(trial)[u]), grains[u] + 1 > quotas[u] + 1e-9, u
        grains[min((u for u in range(len(grains)) if grains[u] < high[u]), key=after)] += 1
    return tuple(grains)
