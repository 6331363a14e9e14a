"""What `mgpu_tf.plan` returns: the options (`Option`) and the ranked plan (`Plan`).

A `Plan` prints as the recommendation, each option's memory per device and the predicted
step over 1, 2, 4, ... devices; `as_dict` gives it as plain data for `mgpu-tf plan --json`.
"""

import dataclasses

from mgpu_tf.planner import memory as memory_lib

__all__ = ["Option", "Plan"]


@dataclasses.dataclass(frozen=True)
class Option:
    """One way to train the model, and what each device needs for it.

    Attributes:
        name: `"one_device"`, `"data"`, `"sharded"` (data with `shard_optimizer_state`),
            `"model"` or `"hybrid"`.
        strategy, options: the `make_strategy` name and options that build it.
        pipelines: model copies training at once; `stages`: devices each is split over.
        batch: examples per copy per step.
        footprints: one `memory.Footprint` per stage (per device).
        device_memory: bytes each device has.
        step_seconds, compute_seconds, efficiency: the predicted step, its compute part
            and their ratio (data parallelism only), or `None`.
    """

    name: str
    strategy: str
    options: dict
    pipelines: int
    stages: int
    batch: int
    footprints: tuple
    device_memory: int
    step_seconds: float = None
    compute_seconds: float = None
    efficiency: float = None

    @property
    def peak(self):
        """Bytes on the fullest device."""
        return max(f.total for f in self.footprints)

    @property
    def fits(self):
        return self.peak <= self.device_memory

    @property
    def shortfall(self):
        """Bytes the fullest device lacks (0 when it fits)."""
        return max(0, self.peak - self.device_memory)

    def __str__(self):
        return (f"{self.name}: {self.strategy} {self.options or ''}".rstrip()
                + f", {self.pipelines} x {self.stages} device(s), peak "
                f"{memory_lib.format_size(self.peak)}")


@dataclasses.dataclass(frozen=True)
class Plan:
    """What `plan` found: the options ranked, the recommendation and its reason.

    Attributes:
        options: every `Option`, best first; `recommended`: the first; `reason`: why.
        devices, workers, device_memory: devices per worker, workers, bytes per device.
        interconnect, schedule: the `Interconnect` and `step_model.Schedule` assumed.
        gradient_bytes: bytes one all-reduce carries.
        compute: where a step's compute came from (`speed.Compute`), or `None`.
        scaling: the data-parallel step (`StepPrediction`) over 1, 2, 4, ... devices at the
            recommended batch; empty without a compute figure or a model fitting one device.
        epochs: an `epoch.EpochPrediction` per row of `scaling`, given `epoch_examples`.
    """

    options: tuple
    reason: str
    devices: int
    workers: int
    device_memory: int
    interconnect: object
    gradient_bytes: int
    compute: object = None
    scaling: tuple = ()
    schedule: object = None
    epochs: tuple = ()

    @property
    def recommended(self):
        return self.options[0]

    def table(self):
        """The options as a compact table, best first, and what its columns add up to."""
        size = memory_lib.format_size
        rows = [f"{'rank':<5}{'option':<11}{'strategy':<15}{'layout':<10}{'batch':>7}"
                f"{'per device':>13}{'params+grads+opt':>18}{'activations':>13}"
                f"{'temporaries':>13}{'fits':>6}{'step':>11}{'efficiency':>12}"]
        for rank, option in enumerate(self.options, 1):
            fullest = max(option.footprints, key=lambda f: f.total)
            state = fullest.params + fullest.gradients + fullest.optimizer
            step = "-" if option.step_seconds is None else f"{option.step_seconds * 1e3:.1f} ms"
            efficiency = "-" if option.efficiency is None else f"{option.efficiency:.0%}"
            fits = "yes" if option.fits else "no"
            rows.append(
                f"{rank:<5}{option.name:<11}{option.strategy:<15}"
                f"{f'{option.pipelines}x{option.stages}':<10}{option.batch:>7}"
                f"{size(option.peak):>13}{size(state):>18}{size(fullest.activations):>13}"
                f"{size(fullest.total - state - fullest.activations):>13}{fits:>6}{step:>11}"
                f"{efficiency:>12}")
            if option.stages > 1:
                rows.append(f"{'':<5}per stage: " + " | ".join(
                    size(f.total) for f in option.footprints))
        return "\n".join(rows + _TABLE_NOTES)

    def scaling_table(self):
        """The data-parallel prediction over device counts, one row per count."""
        epochs = self.epochs or (None,) * len(self.scaling)
        header = (f"{'devices':>8}{'batch/device':>14}{'step':>11}{'compute':>10}"
                  f"{'straggler':>11}{'all-reduce':>12}{'examples/s':>12}{'speed-up':>10}"
                  f"{'efficiency':>12}")
        rows = [header + (f"{'epoch':>12}{'epoch eff.':>12}" if self.epochs else "")]
        for p, e in zip(self.scaling, epochs):
            rows.append(
                f"{p.devices:>8}{p.batch:>14}{p.step * 1e3:>8.1f} ms{p.compute * 1e3:>7.1f} ms"
                f"{p.straggler * 1e3:>8.1f} ms{(p.exposed + p.cycle) * 1e3:>9.1f} ms"
                f"{p.throughput:>12.1f}{p.devices * p.efficiency:>10.2f}{p.efficiency:>12.0%}"
                + ("" if e is None else f"{_duration(e.seconds):>12}{e.efficiency:>12.0%}"))
        return "\n".join(rows)

    def as_dict(self):
        """The plan as plain data, for `json.dumps` (`mgpu-tf plan --json`)."""
        link = self.interconnect
        return {
            "recommended": {"name": self.recommended.name,
                            "strategy": self.recommended.strategy,
                            "options": self.recommended.options},
            "reason": self.reason, "devices": self.devices, "workers": self.workers,
            "device_memory": self.device_memory, "gradient_bytes": self.gradient_bytes,
            "interconnect": {"name": link.name, "bandwidth": link.bandwidth,
                             "latency": link.latency},
            "schedule": self.schedule.name if self.schedule else None,
            "compute": None if self.compute is None else {
                "seconds": self.compute.seconds, "source": self.compute.source,
                "measured_here": self.compute.measured_here},
            "options": [dict(name=o.name, strategy=o.strategy, options=o.options,
                             pipelines=o.pipelines, stages=o.stages, batch=o.batch,
                             peak=o.peak, fits=o.fits, step_seconds=o.step_seconds,
                             efficiency=o.efficiency,
                             footprints=[dict(dataclasses.asdict(f), total=f.total)
                                         for f in o.footprints])
                        for o in self.options],
            "scaling": [p.as_dict() for p in self.scaling],
            "epochs": [e.as_dict() for e in self.epochs],
        }

    def __str__(self):
        link = self.interconnect
        text = (f"recommended: {self.reason}\n{self.workers} worker(s) x {self.devices} "
                f"device(s) of {memory_lib.format_size(self.device_memory)}; interconnect "
                f"{link.name} ({link.bandwidth / 1e9:.2f} GB/s, {link.latency * 1e6:.0f} us "
                f"per hop); gradients {memory_lib.format_size(self.gradient_bytes)}\n"
                + self.table())
        if self.compute is not None:
            text += f"\ncompute of one device's step: {self.compute.seconds * 1e3:.1f} ms, " \
                f"{self.compute.source}"
        if self.scaling:
            text += (f"\ndata parallel over 1 to {self.scaling[-1].devices} devices "
                     f"({self.schedule.name} schedule):\n" + self.scaling_table())
        return text


_TABLE_NOTES = [
    "layout: model copies x devices per copy. batch: examples per copy per step; each stage of a",
    "  pipeline (model, hybrid) processes all of them, each data-parallel device its own share.",
    "per device, on the fullest device = params+grads+opt (weights, gradients, optimizer slots)",
    "  + activations (kept for the backward pass, with the input batch) + temporaries (the most",
    "  other tensors alive at once add, or the optimizer update's workspace beyond the",
    "  activations when that is larger: the activations are freed by then).",
    "per stage: what each device of a pipeline needs, stage 0 first."]


def _duration(seconds):
    """`seconds` in the largest unit that keeps it readable: 41.2 s, 12.5 min, 3.2 h."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
