"""Dividing by weight: batch sizes, the order of a block, and files among workers.

Design: docs/design.md#the-layout-of-a-sharded-epoch
"""

import functools
import math
import numbers
from fractions import Fraction

# The global batch is cut into about this many grains (`grain`).
_GRAINS = 16

__all__ = [
    "assign_files",
    "grain",
    "grain_sizes",
    "piece_size",
    "replica_batch_sizes",
    "smooth_pattern",
    "worker_batch_sizes",
]


def worker_batch_sizes(batch_sizes, replicas_per_worker):
    """Sums per-replica batch sizes (global replica order) by worker."""
    size = replicas_per_worker
    return tuple(sum(batch_sizes[w:w + size]) for w in range(0, len(batch_sizes), size))


def piece_size(size, local_sizes, replica):
    """A replica's share of a worker batch of `size` examples (round robin by weight)."""
    return smooth_pattern(tuple(local_sizes))[:size].count(replica)


def _largest_remainder(total, weights):
    weights = [Fraction(w) for w in weights]
    quotas = [total * w / sum(weights) for w in weights]
    shares = [math.floor(q) for q in quotas]
    order = sorted(range(len(weights)), key=lambda i: (-(quotas[i] - shares[i]), i))
    for i in order[: total - sum(shares)]:
        shares[i] += 1
    return shares


def _check_weights(weights, num_workers, replicas_per_worker):
    per = "worker" if num_workers > 1 else "replica"
    expected = num_workers if num_workers > 1 else replicas_per_worker
    if isinstance(weights, (str, bytes)) or not hasattr(weights, "__len__") or not all(
            isinstance(w, numbers.Real) and not isinstance(w, bool) for w in weights):
        raise TypeError(
            f"`weights` must be a list of numbers, one per {per}. Received: weights={weights!r}"
        )
    weights = [float(w) for w in weights]
    if len(weights) != expected:
        where = (f"{num_workers} workers" if num_workers > 1
                 else f"{replicas_per_worker} replica(s) of this machine")
        raise ValueError(
            f"`weights` must have one entry per {per} ({where}). "
            f"Received: weights={weights!r} ({len(weights)} entries). "
            f"Pass {expected} relative speeds, such as {[1] * expected!r}."
        )
    if any(not math.isfinite(w) or w < 0 for w in weights):
        raise ValueError(
            f"`weights` must be finite and not negative. Received: weights={weights!r}. "
            "Use the relative speed of each device, such as [2, 1]."
        )
    if not any(weights):
        raise ValueError(
            f"`weights` must not all be zero. Received: weights={weights!r}. "
            "Use the relative speed of each device, such as [2, 1]."
        )
    return weights


def replica_batch_sizes(global_batch_size, num_workers, replicas_per_worker, weights=None):
    """Returns the batch size of every replica, in global replica order, for a global batch size.

    `weights` are relative speeds, one per worker (one per replica on one worker), or `None`
    for equal shares. Raises `TypeError` for a batch size or weights not numbers, and
    `ValueError` for a batch size the replicas cannot share, or bad weights.

    Example:

    ```python
    replica_batch_sizes(12, 1, 2, weights=[2, 1])  # (8, 4)
    ```
    """
    replicas = num_workers * replicas_per_worker
    batch = global_batch_size
    if isinstance(batch, bool) or not isinstance(batch, numbers.Integral):
        raise TypeError(
            f"`global_batch_size` must be an integer. Received: global_batch_size={batch!r}"
        )
    batch = int(batch)
    if batch < replicas:
        raise ValueError(
            f"`global_batch_size` must be at least the number of replicas ({replicas}), so "
            f"that each replica gets an example per step. Received: global_batch_size={batch}. "
            f"Use global_batch_size={replicas} or more."
        )
    if weights is None:
        if batch % replicas:
            lower = batch // replicas * replicas
            equal = [1] * (num_workers if num_workers > 1 else replicas)
            raise ValueError(
                f"`global_batch_size` must be divisible by the number of replicas "
                f"({replicas}). Received: global_batch_size={batch}. Use {lower} or "
                f"{lower + replicas}, or pass weights={equal!r} to split it into unequal "
                "batches."
            )
        return (batch // replicas,) * replicas
    weights = _check_weights(weights, num_workers, replicas_per_worker)
    if num_workers > 1:
        workers = _largest_remainder(batch, weights)
        sizes = []
        for share, weight in zip(workers, weights):
            sizes += _largest_remainder(share, [1] * replicas_per_worker) if weight else (
                [0] * replicas_per_worker)
        positive = [w > 0 for w in weights for _ in range(replicas_per_worker)]
    else:
        sizes = _largest_remainder(batch, weights)
        positive = [w > 0 for w in weights]
    if any(p and not s for p, s in zip(positive, sizes)):
        larger = batch + 1
        while any(p and not s for p, s in zip(
                positive, replica_batch_sizes(larger, num_workers, replicas_per_worker,
                                              weights))):
            larger += 1
        raise ValueError(
            f"`global_batch_size` is too small for these weights: a replica with a "
            f"positive weight would get no example per step ({sizes}). Received: "
            f"global_batch_size={batch}, weights={weights!r}. Use global_batch_size={larger} "
            "or more."
        )
    return tuple(sizes)


def grain(global_batch_size, units, per_unit=1):
    """Examples of one grain of a unit (worker, or replica on one machine): the step of its size.

    About 16 grains make the global batch, each a whole number of examples for every
    replica of a unit, and every unit can keep one. What 16 grains leave over (`rest`)
    always goes to unit 0, so every unit's size is `k * grain` (plus `rest` for unit 0)
    and the sizes a replica can get form a set of about 16.

    Example:

    ```python
    grain(2048, 2)  # 128: sizes 128, 256, ..., 1920
    grain(1000, 2)  # 63: 15 grains and a rest of 55
    ```

    Args:
        global_batch_size: examples per step over all replicas.
        units: units sharing it.
        per_unit: replicas of one unit. Defaults to `1`.

    Returns:
        The grain, a multiple of `per_unit`.
    """
    size = per_unit * math.ceil(global_batch_size / (_GRAINS * per_unit))
    if global_batch_size // size < units:
        size = per_unit * (global_batch_size // (units * per_unit))
    return max(size, per_unit)


def grain_sizes(grains, size, global_batch_size):
    """Each unit's examples per step for its number of grains: `rest` goes to unit 0.

    Example:

    ```python
    grain_sizes([11, 5], 128, 2048)  # (1408, 640)
    ```
    """
    rest = global_batch_size - size * (global_batch_size // size)
    return tuple(k * size + (rest if u == 0 else 0) for u, k in enumerate(grains))


def smooth_pattern(shares):
    """Returns the owner of each of `sum(shares)` slots, each owner's slots spread evenly.

    Example:

    ```python
    smooth_pattern([2, 1])  # (0, 1, 0)
    ```
    """
    return _smooth_pattern(tuple(shares))


@functools.lru_cache(maxsize=64)
def _smooth_pattern(shares):
    period = sum(shares)
    taken = [0] * len(shares)
    slots = []
    for p in range(period):
        owner = max(range(len(shares)),
                    key=lambda o: (shares[o] * (p + 1) - taken[o] * period, -o))
        taken[owner] += 1
        slots.append(owner)
    return tuple(slots)


def assign_files(counts, worker_sizes):
    """Gives whole files to workers so that examples match their batch sizes.

    Returns, per worker, the indices into `counts` (examples per file) it reads, in order.
    """
    loads = [0] * len(worker_sizes)
    owned = [[] for _ in worker_sizes]
    for index in sorted(range(len(counts)), key=lambda i: (-counts[i], i)):
        worker = min((w for w, size in enumerate(worker_sizes) if size),
                     key=lambda w: (Fraction(loads[w] + counts[index], worker_sizes[w]), w))
        loads[worker] += counts[index]
        owned[worker].append(index)
    return tuple(tuple(sorted(files)) for files in owned)
