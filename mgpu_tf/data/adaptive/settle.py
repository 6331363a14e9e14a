"""When adaptive shares move: smoothed figures, a dead band, and a move that pays for itself.

`shares.AdaptiveShares.decide` asks `Settle` whether the sizes it proposes
are worth a change of shares.

Design: docs/design.md#adaptive-shard-weights
"""

import math
import statistics

import numpy as np

from mgpu_tf.data.adaptive import compute_curve

__all__ = ["Settle", "SpeedWindow", "next_shares", "usable",
           "DEFAULT_MAX_CHANGE", "DEFAULT_TOLERANCE"]

# A share moves by at most this factor per epoch (x1.5 or /1.5).
DEFAULT_MAX_CHANGE = 0.5
# Shares within 10% of their targets stay as they are (`next_shares`).
DEFAULT_TOLERANCE = 0.1

# Speed figures the median is taken over.
WINDOW = 5
# A unit's part of the summed speed that moved by this much (relative), the same way in the
# last two figures, is a clear change: the figures before it are dropped.
CLEAR_CHANGE = 0.2
# Predicted step gain (relative) that starts a move, and that carries on a move that the
# bound on one epoch's change cut short.
START_BAND = DEFAULT_TOLERANCE
GO_ON_BAND = 0.03
# Cost of a new size under XLA before any was measured: a compile of a small model.
DEFAULT_COMPILE_SECONDS = 1.0
# Settled shares take speeds again after 2, 4, ... 2 ** LONGEST_BACKOFF epochs.
LONGEST_BACKOFF = 4


def _normalised(values):
    total = float(sum(values))
    return tuple(float(v) / total for v in values)


def _at_least(shares, minimum):
    """`shares` (summing to 1) with none below `minimum`: the others give up the difference."""
    fixed = set()
    while True:
        low = {i for i, v in enumerate(shares) if v < minimum and i not in fixed}
        if not low:
            return shares
        fixed |= low
        free = sum(v for i, v in enumerate(shares) if i not in fixed)
        scale = (1.0 - minimum * len(fixed)) / free if free else 0.0
        shares = tuple(minimum if i in fixed else v * scale for i, v in enumerate(shares))


def next_shares(shares, speeds, *, max_change=DEFAULT_MAX_CHANGE, tolerance=DEFAULT_TOLERANCE,
                minimum=0.0):
    """The shares for the next epoch, from this epoch's shares and measured speeds.

    Example:

    ```python
    next_shares([0.5, 0.5], [200.0, 100.0])  # (0.666667, 0.333333): the target
    next_shares([0.5, 0.5], [400.0, 100.0])  # (0.666667, 0.333333): 0.5 / 1.5 at most
    ```

    Args:
        shares: this epoch's shares (any positive scale).
        speeds: each unit's measured examples per second; a unit without a usable
            figure (not a positive finite number) keeps the shares as they are.
        max_change: largest relative move of a share in one epoch. Defaults to `0.5`.
        tolerance: relative distance to the target below which nothing moves.
            Defaults to `0.1`.
        minimum: smallest share a unit keeps. Defaults to `0`.

    Returns:
        A tuple of shares summing to 1.
    """
    current = _normalised(shares)
    if len(speeds) != len(current) or not all(
            isinstance(s, (int, float, np.floating)) and math.isfinite(s) and s > 0
            for s in speeds):
        return current
    target = _at_least(_normalised(speeds), minimum)
    if max(abs(t - c) / c for t, c in zip(target, current)) <= tolerance:
        return current
    bound = 1.0 + max_change
    step = 1.0
    for t, c in zip(target, current):
        if t > c * bound:
            step = min(step, c * (bound - 1.0) / (t - c))
        elif t < c / bound:
            step = min(step, c * (1.0 - 1.0 / bound) / (c - t))
    return tuple(round(c + step * (t - c), 6) for t, c in zip(target, current))


def usable(speeds, units):
    """True when `speeds` holds one positive finite figure per unit."""
    return len(speeds) == units and all(
        isinstance(s, (int, float, np.floating)) and not isinstance(s, bool)
        and math.isfinite(s) and s > 0 for s in speeds)


class SpeedWindow:
    """The last `WINDOW` figures of speeds and sizes, reset on a clear change."""

    def __init__(self):
        self.figures = []
        self.sizes = []  # each unit's examples per step in each figure

    def add(self, speeds, sizes):
        """Takes one figure per unit, measured at `sizes`; keeps the last two on a clear change."""
        self.figures = (self.figures + [tuple(float(s) for s in speeds)])[-WINDOW:]
        self.sizes = (self.sizes + [tuple(int(s) for s in sizes)])[-WINDOW:]
        if len(self.figures) >= 3:
            before = [statistics.median(p) for p in zip(*map(_normalised, self.figures[:-2]))]
            moved = [[(n - b) / b for n, b in zip(_normalised(f), before)]
                     for f in self.figures[-2:]]
            if any(abs(a) > CLEAR_CHANGE and abs(b) > CLEAR_CHANGE and a * b > 0
                   for a, b in zip(*moved)):
                self.figures, self.sizes = self.figures[-2:], self.sizes[-2:]

    def restart(self):
        """Forgets every figure: the speeds changed for a known reason."""
        self.figures, self.sizes = [], []

    def curves(self, *, latest=False):
        """Each unit's `compute_curve.Curve` through its median compute at every size of
        the window's figures; with `latest`, the latest figure stands alone at its sizes."""
        seconds = {}
        for figure, sizes in zip(self.figures, self.sizes):
            for unit, (speed, size) in enumerate(zip(figure, sizes)):
                seconds.setdefault((unit, size), []).append(size / speed)
        if latest:
            for unit, (speed, size) in enumerate(zip(self.figures[-1], self.sizes[-1])):
                seconds[(unit, size)] = [size / speed]
        points = [{} for _ in self.figures[-1]]
        for (unit, size), values in seconds.items():
            points[unit][size] = statistics.median(values)
        return tuple(compute_curve.fit(p) for p in points)


class Settle:
    """The hysteresis and payback rule of adaptive shares, and what a new size costs.

    A move starts when the proposed sizes are predicted to make the step `start_band`
    faster, and goes on while `GO_ON_BAND` when the last move was cut short; it must pay
    back its cost within the next epoch: predicted gain per step times steps above the
    cost. A size the run has not used costs an XLA compile (learnt from first steps); a
    size seen, or any size without XLA (the step is traced for any batch size), nothing.

    Args:
        start_band: predicted step gain (relative) that starts a move. Defaults to `0.1`.
    """

    def __init__(self, *, start_band=START_BAND):
        self.window = SpeedWindow()
        self.start_band = start_band
        self.moving = False
        self.seen = set()
        self._usual = []  # first step over a normal step, in epochs of seen sizes
        self._new = None  # the same, in the latest epoch of a size not seen before

    def observe(self, sizes, first_step, step):
        """Notes an epoch's per-replica `sizes` and its first step's excess over `step`."""
        new = not set(sizes) <= self.seen
        self.seen |= set(sizes)
        if first_step is None or step is None or not (math.isfinite(first_step)
                                                      and math.isfinite(step)):
            return
        excess = max(0.0, first_step - step)
        if new:
            self._new = excess
        else:
            self._usual = (self._usual + [excess])[-WINDOW:]

    def cost(self, sizes, jit_compile, planned=()):
        """Seconds a change to per-replica `sizes` is expected to cost once; the sizes of
        `planned` epochs compile anyway."""
        if not jit_compile or set(sizes) <= self.seen | set(planned):
            return 0.0
        if self._new is None:
            return DEFAULT_COMPILE_SECONDS
        return max(0.0, self._new - (statistics.median(self._usual) if self._usual else 0.0))

    def worth(self, now, proposed, curves, *, cost, steps):
        """True when unit sizes `proposed` beat `now` by the band and pay back `cost`,
        the step predicted from each unit's `compute_curve.Curve`."""
        before = compute_curve.step_seconds(now, curves)
        after = compute_curve.step_seconds(proposed, curves)
        band = GO_ON_BAND if self.moving else self.start_band
        if before - after <= band * before:
            return False
        return steps is None or (before - after) * steps > cost
