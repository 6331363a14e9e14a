"""Each unit's compute per step against its examples: a fixed part and a part per example.

Adaptive shares fit one `Curve` per unit to the sizes measured and split the grains by
them (`best_grains`).

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
    """The least-squares `Curve` through `points` (`{examples: seconds}`); one size gives a
    proportional one. The slope is cut to [0, the least seconds per example], so a curve
    never falls and its fixed part is never negative: noise between two close sizes
    cannot make more examples look cheaper."""
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


def _quotas(grains, count):
    """`grains` (any positive scale) as shares of `count` grains."""
    total = float(sum(grains))
    return [count * g / total for g in grains]


def bounds(grains, count, max_change):
    """Each unit's fewest and most grains within a factor `1 + max_change` of `grains`."""
    most = count - len(grains) + 1
    if math.isinf(max_change):
        return [1] * len(grains), [most] * len(grains)
    quotas = _quotas(grains, count)
    low = [max(1, math.floor(q / (1.0 + max_change) + 0.5)) for q in quotas]
    high = [min(most, math.floor(q * (1.0 + max_change) + 0.5)) for q in quotas]
    if sum(low) > count or sum(high) < count:
        return [1] * len(grains), [most] * len(grains)
    return low, [max(h, lo) for h, lo in zip(high, low)]


def best_grains(curves, sizes_of, count, low, high, now):
    """The split of `count` grains (each unit's in `[low, high]`) whose slowest unit is
    fastest: grains go one at a time to the unit that stays fastest with one more (optimal
    for curves that never fall); ties to a unit below its grains `now`, so they keep it."""
    quotas = _quotas(now, count)
    grains = list(low)
    for _ in range(count - sum(grains)):
        def after(u):
            trial = grains[:u] + [grains[u] + 1] + grains[u + 1:]
            return curves[u](sizes_of(trial)[u]), grains[u] + 1 > quotas[u] + 1e-9, u
        grains[min((u for u in range(len(grains)) if grains[u] < high[u]), key=after)] += 1
    return tuple(grains)
