"""The training monitor's figures, one entry each: where each comes from and where it shows.

The monitor, its TensorBoard scalars, its Prometheus endpoint and `mgpu-tf top` read `FIGURES`;
adding a figure is one entry here. Design: docs/design.md#training-monitor
"""

import dataclasses
import enum

__all__ = ["Source", "Metric", "TopColumn", "Figure", "FIGURES", "named", "names", "to_row",
           "from_row"]

# A figure's unit: its scale to the base unit Prometheus wants (seconds, bytes, ratios).
_TO_BASE = {"ms": 1e-3, "MB": 1024.0 * 1024.0, "%": 0.01}


class Source(str, enum.Enum):
    """Where a figure's value is made."""

    ROW = "row"  # measured by each worker, in the row of figures all workers exchange
    UNIT = "unit"  # from a worker's row, once exchanged
    RECORD = "record"  # one value of the interval, the same for every worker
    EXPORTER = "exporter"  # made by the metrics exporter from every worker's row


@dataclasses.dataclass(frozen=True)
class Metric:
    """A figure's Prometheus gauge, labelled by job and worker, in the figure's base unit."""

    name: str
    help: str


@dataclasses.dataclass(frozen=True)
class TopColumn:
    """A figure's column in `mgpu-tf top`; `percent_of` names the figure it is a share of."""

    header: str
    digits: int = 1
    percent_of: str | None = None


@dataclasses.dataclass(frozen=True)
class Figure:
    """One figure of the monitor.

    Example:

    ```python
    Figure("step_ms", "ms", Source.ROW, logged=True, scalar=True,
           metric=Metric("mgpu_tf_step_seconds", "Wall time of one training step."))
    ```

    Args:
        name: its key in `History`, the logs and `TrainingMonitor.history`.
        unit: its unit (`"ms"`, `"MB"`, `"%"`, ...); Prometheus has it in base units.
        source: where its value is made (`Source`).
        logged: in this worker's `History`. Defaults to `False`.
        shown: in the progress bar as well (Keras' logs). Defaults to `False`.
        scalar: a TensorBoard scalar of the chief's, tagged `tag(worker)`. Defaults to `False`.
        metric: its Prometheus gauge. Defaults to `None`.
        table: its column header in the table the chief prints. Defaults to `None`.
        top: its column in `mgpu-tf top`. Defaults to `None`.
    """

    name: str
    unit: str
    source: Source
    logged: bool = False
    shown: bool = False
    scalar: bool = False
    metric: Metric | None = None
    table: str | None = None
    top: TopColumn | None = None

    def __post_init__(self):
        if self.shown and not self.logged:
            raise ValueError(f"A figure in the progress bar must be logged. Received: "
                             f"name={self.name!r}, shown=True, logged=False. Pass logged=True.")

    @property
    def to_base(self):
        """The scale from the figure's unit to its metric's base unit."""
        return _TO_BASE.get(self.unit, 1.0)

    def value(self, record, worker):
        """Its value for worker `worker` in `record` (a `TrainingMonitor.history` record)."""
        if self.source == Source.EXPORTER:
            raise ValueError(f"`{self.name}` is made by the metrics exporter, not recorded. "
                             f"Received: figure={self.name!r}.")
        return (record if self.source == Source.RECORD else record["units"][worker])[self.name]

    def tag(self, worker):
        """Its TensorBoard tag, for worker `worker` of the record."""
        if self.source == Source.RECORD:
            return f"monitor/{self.name}"
        return f"monitor/worker_{worker}/{self.name}"


# In the order of the chief's table and `mgpu-tf top`'s columns.
FIGURES = (
    Figure("batch", "examples", Source.ROW, table="examples/step",
           metric=Metric("mgpu_tf_batch_examples", "Examples per step of this worker.")),
    Figure("step_ms", "ms", Source.ROW, logged=True, shown=True, scalar=True, table="step ms",
           top=TopColumn("step ms"),
           metric=Metric("mgpu_tf_step_seconds",
                         "Wall time of one training step over the monitor's last interval.")),
    Figure("compute_ms", "ms", Source.ROW, logged=True, scalar=True, table="compute ms",
           top=TopColumn("compute ms"),
           metric=Metric("mgpu_tf_compute_seconds", "The forward and backward pass of one "
                         "step alone, as the monitor's probe times it.")),
    Figure("wait_ms", "ms", Source.UNIT, logged=True, shown=True, scalar=True, table="wait ms",
           top=TopColumn("wait %", percent_of="step_ms"),
           metric=Metric("mgpu_tf_wait_seconds", "Step time not spent computing: waiting for "
                         "the other workers and for data.")),
    Figure("examples_per_sec", "examples/s", Source.UNIT, logged=True, scalar=True,
           table="examples/s", top=TopColumn("examples/s"),
           metric=Metric("mgpu_tf_examples_per_second",
                         "Examples this worker trains on per second.")),
    Figure("utilization_pct", "%", Source.ROW, logged=True, scalar=True, table="util %",
           top=TopColumn("util %"),
           metric=Metric("mgpu_tf_utilization_ratio", "Busy share of the worker's GPUs "
                         "(NVML), or of the CPU cores it may use, from 0 to 1.")),
    Figure("memory_mb", "MB", Source.ROW, logged=True, scalar=True, table="memory MB",
           top=TopColumn("memory MB"),
           metric=Metric("mgpu_tf_memory_bytes",
                         "Memory in use: the GPUs' allocator's, else the resident set.")),
    Figure("peak_memory_mb", "MB", Source.ROW, logged=True, scalar=True, table="peak MB",
           metric=Metric("mgpu_tf_peak_memory_bytes",
                         "Peak memory: the GPUs' allocator's, else the resident set's.")),
    Figure("first_step_ms", "ms", Source.ROW),
    Figure("share", "ratio", Source.EXPORTER, top=TopColumn("share", digits=2),
           metric=Metric("mgpu_tf_share_ratio",
                         "This worker's share of the global batch, from 0 to 1.")),
    Figure("straggler_ratio", "ratio", Source.RECORD, logged=True, scalar=True,
           metric=Metric("mgpu_tf_straggler_slowdown", "The slowest worker's compute time "
                         "over the median worker's (1: none holds the others back).")),
    Figure("epoch", "epoch", Source.RECORD,
           metric=Metric("mgpu_tf_epoch", "The epoch being trained, from 0 as Keras counts.")),
)
_BY_NAME = {figure.name: figure for figure in FIGURES}


def named(name):
    """The figure called `name`."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"`name` must be a figure of `FIGURES`. Received: name={name!r}. "
                         f"Known: {', '.join(_BY_NAME)}.") from None


def names(*sources, **where):
    """The names of the figures from `sources` (all when none) whose fields equal `where`'s,
    e.g. `names(Source.ROW, Source.UNIT, logged=True)`."""
    return tuple(f.name for f in FIGURES if (not sources or f.source in sources)
                 and all(getattr(f, field) == value for field, value in where.items()))


def to_row(values):
    """The row a worker exchanges: `values` (`{name: value}` of every `Source.ROW` figure),
    in the table's order."""
    row = names(Source.ROW)
    if set(values) != set(row):
        raise ValueError(f"A row must hold every figure of `Source.ROW` and no other. Received: "
                         f"{sorted(values)}. Expected: {sorted(row)}.")
    return [values[name] for name in row]


def from_row(row):
    """`{name: value}` of an exchanged row (`to_row`'s)."""
    return dict(zip(names(Source.ROW), row, strict=True))
