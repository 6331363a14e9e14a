"""Who reads what: the arithmetic of a sharded epoch, without TensorFlow.

A `ShardingPlan` holds every replica's batch size, the split of each step between workers and
replicas, and the steps of an epoch, all in plain Python so a bad request fails before any data
is read.

Design: docs/design.md#the-layout-of-a-sharded-epoch
"""

import dataclasses

from mgpu_tf.base.choice import Choice
from mgpu_tf.data.split import piece_size, smooth_pattern, worker_batch_sizes

__all__ = [
    "ShardPolicy",
    "ReplicaShare",
    "ShardingPlan",
    "plan_data",
    "plan_streams",
]


class ShardPolicy(Choice):
    """How examples are divided between workers."""

    AUTO = "auto"
    FILE = "file"
    DATA = "data"
    OFF = "off"


@dataclasses.dataclass(frozen=True)
class ReplicaShare:
    """What one replica gets in one epoch.

    Attributes:
        worker, replica: the worker, and the replica within it.
        batch_size: examples per full step; `examples`: per epoch.
        batches: steps in which it gets at least one example.
        last_batch: size of its last non-empty batch (0 if it gets none).
        empty_steps: steps in which it gets an empty batch.
    """

    worker: int
    replica: int
    batch_size: int
    examples: int
    batches: int
    last_batch: int
    empty_steps: int


@dataclasses.dataclass(frozen=True)
class ShardingPlan:
    """One epoch of a sharded data set (layout: docs/design.md#the-layout-of-a-sharded-epoch).

    Attributes:
        policy: `"data"`, `"file"` or `"off"` (never `"auto"`); `reason`: why.
        batch_sizes: per-replica batch sizes, in global replica order.
        steps: steps per epoch; every replica gets a batch (maybe empty) in each.
        full_steps: steps, from the first, in which every replica's batch is full.
        tail_totals: examples in all of each step after `full_steps`.
        worker_examples: examples in each worker's stream (`"data"`: its share).
        worker_files: the files of each worker (`"file"`), else `None`.
        pattern: owner of each position of a block (`"data"`), else `None`.
        dropped: examples left out by `drop_remainder=True`.
    """

    policy: str
    reason: str
    num_workers: int
    replicas_per_worker: int
    global_batch_size: int
    batch_sizes: tuple
    num_examples: int
    steps: int
    full_steps: int
    tail_totals: tuple
    worker_examples: tuple
    worker_files: tuple = None
    pattern: tuple = None
    dropped: int = 0

    @property
    def num_replicas(self):
        return self.num_workers * self.replicas_per_worker

    @property
    def worker_batch_sizes(self):
        """Examples per full step on each worker."""
        return worker_batch_sizes(self.batch_sizes, self.replicas_per_worker)

    def step_total(self, step):
        """Examples in all of step `step`."""
        if step < self.full_steps:
            return self.global_batch_size
        return self.tail_totals[step - self.full_steps]

    def worker_batch(self, worker, step):
        """Size of worker `worker`'s batch in step `step`."""
        size = self.worker_batch_sizes[worker]
        if step < self.full_steps:
            return size
        if self.policy == ShardPolicy.DATA:
            block = self.step_total(step)
            return sum(1 for owner in self.pattern[:block] if owner == worker)
        return min(size, max(0, self.worker_examples[worker] - step * size))

    def replica_batch(self, worker, replica, step):
        """Size of one replica's batch in step `step`."""
        return piece_size(self.worker_batch(worker, step), self.local_sizes(worker), replica)

    def local_sizes(self, worker):
        """Batch sizes of one worker's replicas."""
        size = self.replicas_per_worker
        return self.batch_sizes[worker * size:(worker + 1) * size]

    @property
    def uneven(self):
        """True when, in some step, replicas get batches of different sizes."""
        if len(set(self.batch_sizes)) > 1:
            return True
        return any(
            len({self.replica_batch(w, r, s) for w in range(self.num_workers)
                 for r in range(self.replicas_per_worker)}) > 1
            for s in range(self.full_steps, self.steps)
        )

    @property
    def shares(self):
        """A `ReplicaShare` for every replica, in global replica order."""
        out = []
        for w in range(self.num_workers):
            for r in range(self.replicas_per_worker):
                size = self.batch_sizes[w * self.replicas_per_worker + r]
                tail = [self.replica_batch(w, r, s) for s in range(self.full_steps, self.steps)]
                full = self.full_steps if size else 0
                sizes = [n for n in tail if n]
                last = sizes[-1] if sizes else (size if full else 0)
                out.append(ReplicaShare(
                    worker=w, replica=r, batch_size=size,
                    examples=self.full_steps * size + sum(tail),
                    batches=full + len(sizes), last_batch=last,
                    empty_steps=self.steps - full - len(sizes)))
        return tuple(out)

    def table(self):
        """The plan as a text table, one line per replica."""
        head = (
            f"policy={self.policy} ({self.reason}); {self.num_workers} worker(s) x "
            f"{self.replicas_per_worker} replica(s); global batch {self.global_batch_size}; "
            f"{self.num_examples} examples; {self.steps} steps per epoch"
            + (f"; {self.dropped} dropped" if self.dropped else "")
        )
        columns = ("worker", "replica", "batch", "examples", "batches", "last batch",
                   "empty steps")
        rows = [(s.worker, s.replica, s.batch_size, s.examples, s.batches, s.last_batch,
                 s.empty_steps) for s in self.shares]
        widths = [max(len(c), *(len(str(r[i])) for r in rows)) for i, c in enumerate(columns)]
        lines = [head, "  ".join(c.rjust(w) for c, w in zip(columns, widths))]
        lines += ["  ".join(str(v).rjust(w) for v, w in zip(row, widths)) for row in rows]
        return "\n".join(lines)

    def __str__(self):
        return self.table()


def _empty_error(num_examples, batch):
    return ValueError(
        f"With drop_remainder=True, an epoch has no full step: {num_examples} examples "
        f"do not fill one global batch of {batch}. Received: drop_remainder=True. "
        "Pass drop_remainder=False or a smaller global_batch_size."
    )


def plan_data(num_examples, batch_sizes, num_workers, replicas_per_worker, *,
              drop_remainder=False, reason="requested"):
    """Plans `"data"` sharding: every worker reads all examples and keeps its own.

    `batch_sizes` are per replica (`mgpu_tf.data.split.replica_batch_sizes`); `reason` is
    shown in the table. Returns a `ShardingPlan`.
    """
    batch = sum(batch_sizes)
    worker_sizes = worker_batch_sizes(batch_sizes, replicas_per_worker)
    pattern = smooth_pattern(tuple(worker_sizes))
    full, rest = divmod(num_examples, batch)
    if drop_remainder:
        if not full:
            raise _empty_error(num_examples, batch)
        rest = 0
    steps = full + (1 if rest else 0)
    worker_examples = tuple(
        full * worker_sizes[w] + sum(1 for owner in pattern[:rest] if owner == w)
        for w in range(num_workers))
    return ShardingPlan(
        policy=ShardPolicy.DATA.value, reason=reason, num_workers=num_workers,
        replicas_per_worker=replicas_per_worker, global_batch_size=batch,
        batch_sizes=tuple(batch_sizes), num_examples=num_examples, steps=steps,
        full_steps=full, tail_totals=(rest,) if rest else (),
        worker_examples=worker_examples, pattern=pattern,
        dropped=num_examples - full * batch - rest)


def plan_streams(worker_examples, batch_sizes, num_workers, replicas_per_worker, *,
                 policy, drop_remainder=False, worker_files=None, reason="requested"):
    """Plans `"file"` or `"off"` sharding: each worker reads its own stream of `worker_examples`.

    With `drop_remainder`, it stops when the first worker cannot fill a batch. Returns a
    `ShardingPlan`; raises `ValueError` when a worker of batch size 0 has examples, or no
    step is left.
    """
    worker_sizes = worker_batch_sizes(batch_sizes, replicas_per_worker)
    for w, (count, wsize) in enumerate(zip(worker_examples, worker_sizes)):
        if count and not wsize:
            raise ValueError(
                f"Worker {w} has weight 0 but its input has {count} examples, which no "
                f"replica would read. Received: batch sizes {list(batch_sizes)}. Give it a "
                "positive weight, or give it no examples."
            )
    active = [w for w in range(num_workers) if worker_sizes[w]]
    full = min(worker_examples[w] // worker_sizes[w] for w in active)
    if drop_remainder:
        if not full:
            raise _empty_error(sum(worker_examples), sum(batch_sizes))
        steps = full
    else:
        steps = max(-(-worker_examples[w] // worker_sizes[w]) for w in active)
    kept = [min(worker_examples[w], steps * worker_sizes[w]) for w in range(num_workers)]
    tail = tuple(
        sum(min(worker_sizes[w], max(0, kept[w] - s * worker_sizes[w]))
            for w in range(num_workers))
        for s in range(full, steps))
    return ShardingPlan(
        policy=str(ShardPolicy(policy)), reason=reason, num_workers=num_workers,
        replicas_per_worker=replicas_per_worker, global_batch_size=sum(batch_sizes),
        batch_sizes=tuple(batch_sizes), num_examples=sum(worker_examples), steps=steps,
        full_steps=full, tail_totals=tail, worker_examples=tuple(kept),
        worker_files=worker_files, dropped=sum(worker_examples) - sum(kept))
