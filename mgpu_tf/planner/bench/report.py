"""The scaling benchmark's figures: summary rows, the table, the JSON file and the plot.

Design: docs/design.md#the-scaling-benchmark
"""

import json
import statistics

__all__ = ["summarise", "format_table", "write_json", "plot_points", "write_plot"]


def summarise(settings, runs):
    """Median figures per setting, with the ratios and the cost model's predictions.

    `runs` is `{setting name: [the figures of each round]}`, as `mgpu_tf.cli.bench_scaling.measure` returns
    them. A ratio is the median over rounds of the setting's examples/s over the
    1-process row's in the same round; a whole-run ratio (`fit_ratio`) is the median of
    the 1-process row's `fit_seconds` over the setting's, so that above 1 is faster too.

    Returns:
        One dictionary per setting: its fields, the median of each figure (a word, the
        `transport`, as the rounds gave it), `examples_per_sec_by_round`, and where they apply `ratio`, `fit_ratio`,
        `bandwidth` (TCP over loopback), `model_all_reduce_seconds`,
        `link_model_all_reduce_seconds` and `predicted_step_seconds`.
    """
    from mgpu_tf.planner import cost_model

    rows = []
    for s in settings:
        row = {"key": s.key, "name": s.name, "mode": s.mode, "count": s.count,
               "threads": s.threads, "global_batch": s.global_batch,
               "options": dict(s.options), "defaults": s.defaults, "group": s.group,
               "rounds": len(runs[s.name])}
        for key in runs[s.name][0]:
            values = [r[key] for r in runs[s.name]]
            # A word (the transport the gradients took) is kept as its rounds gave it.
            row[key] = (" / ".join(dict.fromkeys(values)) if isinstance(values[0], str)
                        else statistics.median(values))
        row["examples_per_sec_by_round"] = [r["examples_per_sec"] for r in runs[s.name]]
        rows.append(row)
    by_group = {r["group"]: r for r in rows}
    names = {s.group: s.name for s in settings}
    # A worker's step alone under multi_worker (the strategy's own work included),
    # else its bare computation.
    compute = by_group.get("compute-worker") or by_group.get("compute")
    # A ring of two sends and receives at once: two opposite streams share the loopback.
    bandwidth = cost_model.measure_loopback_bandwidth(streams=2)
    keys = {s.key: s.name for s in settings}
    for row, setting in zip(rows, settings):
        same_precision = row["mode"] != "process" and "mixed_bfloat16" in row["group"]
        base = "process mixed_bfloat16" if same_precision else "process"
        if setting.base:
            base = "process +switches"
            _switch_speedups(row, runs, keys[setting.base], names.get(base),
                             keys.get("processN"))
        if base in names and row["group"] != base and row["group"] != "process":
            # Paired by round: each round ran both settings minutes apart, under one load.
            pairs = list(zip(runs[row["name"]], runs[names[base]]))
            row["ratio"] = statistics.median(
                r["examples_per_sec"] / b["examples_per_sec"] for r, b in pairs)
            if _whole_runs(pairs):
                row["fit_ratio"] = statistics.median(
                    b["fit_seconds"] / r["fit_seconds"] for r, b in pairs)
        if "all_reduce_seconds" in row and row["count"] > 1:
            row["bandwidth"] = bandwidth
            row["model_all_reduce_seconds"] = cost_model.ring_all_reduce_seconds(
                row["gradient_bytes"], row["count"], bandwidth, row["latency_seconds"])
            row["link_model_all_reduce_seconds"] = cost_model.ring_all_reduce_seconds(
                row["gradient_bytes"], row["count"], row["transport_bandwidth"],
                row["latency_seconds"])
            if compute and not row["options"].get("precision"):
                # Keras also all-reduces the step's logs: one more fixed cost a step.
                row["predicted_step_seconds"] = cost_model.predict_step_seconds(
                    compute["step_seconds"], row["gradient_bytes"], row["count"],
                    row["transport_bandwidth"], row["latency_seconds"],
                    steps_per_sync=int(row["options"].get("steps_per_sync", 1))
                ) + row["latency_seconds"]
    return rows


def _whole_runs(pairs):
    """Whether every run of `pairs` (tuples of one round's figures) timed its whole fit."""
    return all("fit_seconds" in figures for pair in pairs for figures in pair)


def _switch_speedups(row, runs, without, default_with, default_without):
    """Adds the speed-up the switches give `row`, and its share of the default strategy's,
    by steps (examples/s of the timed epoch) and by whole run (the fit's seconds)."""
    pairs = list(zip(runs[row["name"]], runs[without]))
    row["switch_speedup"] = statistics.median(
        r["examples_per_sec"] / b["examples_per_sec"] for r, b in pairs)
    if _whole_runs(pairs):
        row["fit_switch_speedup"] = statistics.median(
            b["fit_seconds"] / r["fit_seconds"] for r, b in pairs)
    if default_with and default_without and default_with != row["name"]:
        # Paired by round: (with / without here) / (with / without for the default strategy).
        rounds = list(zip(runs[row["name"]], runs[without], runs[default_with],
                          runs[default_without]))
        row["speedup_vs_default"] = statistics.median(
            (r["examples_per_sec"] / b["examples_per_sec"])
            / (d["examples_per_sec"] / e["examples_per_sec"]) for r, b, d, e in rounds)
        if _whole_runs(rounds):
            row["fit_speedup_vs_default"] = statistics.median(
                (b["fit_seconds"] / r["fit_seconds"]) / (e["fit_seconds"] / d["fit_seconds"])
                for r, b, d, e in rounds)


def format_table(rows):
    """The summary rows as a compact table, with a note on the bandwidths."""
    width = max([len("setting")] + [len(r["name"]) for r in rows]) + 1
    lines = [f"{'setting':<{width}}{'ex/s':>9}{'ratio':>7}{'fit s':>8}{'fit ratio':>10}"
             f"{'step ms':>9}{'comm ms':>9}{'tcp ms':>9}{'link ms':>9}{'pred ms':>9}"
             "  transport"]

    def ms(row, key):
        return f"{row[key] * 1e3:>9.1f}" if key in row else f"{'':>9}"

    def cell(row, key, width, digits=2):
        return f"{row[key]:>{width}.{digits}f}" if key in row else f"{'':>{width}}"

    for r in rows:
        lines.append(f"{r['name']:<{width}}{r['examples_per_sec']:>9.0f}{cell(r, 'ratio', 7)}"
                     f"{cell(r, 'fit_seconds', 8)}{cell(r, 'fit_ratio', 10)}"
                     f"{ms(r, 'step_seconds')}{ms(r, 'all_reduce_seconds')}"
                     f"{ms(r, 'model_all_reduce_seconds')}"
                     f"{ms(r, 'link_model_all_reduce_seconds')}{ms(r, 'predicted_step_seconds')}"
                     f"{_transport_cell(r)}".rstrip())
    bandwidth = next((r["bandwidth"] for r in rows if "bandwidth" in r), None)
    if bandwidth:
        links = []
        for transport, path in (("tensorflow", "TensorFlow's collectives (all-gather)"),
                                ("tcp", "the tcp ring (its all-gather)")):
            seen = [r["transport_bandwidth"] for r in rows if "transport_bandwidth" in r
                    and r["count"] > 1 and _transport(r) == transport]
            if seen:
                links.append(f"{statistics.median(seen) / 1e9:.2f} GB/s through {path}")
        lines.append(
            f"loopback bandwidth: {bandwidth / 1e9:.2f} GB/s each way over two TCP "
            "sockets at once, "
            f"{', '.join(links)}. comm: all-reduce of the gradients alone; tcp, link: the "
            "ring model with each bandwidth; pred: the cost model's step (a worker's "
            "measured step alone under multi_worker, else its 1-thread computation, + link "
            "model). ratio: against the 1-process row of the same precision, median of the "
            "rounds' ratios.")
    if any("transport" in r for r in rows):
        lines.append("transport: the way the gradients took between workers; auto: what "
                     "transport=\"auto\" chose for the default options.")
    lines.append("fit s: the whole model.fit (both epochs: tracing, compiles and epoch "
                 "starts included); fit ratio: the 1-process row's fit seconds over this "
                 "row's, median of the rounds' ratios (above 1: the whole run is faster).")
    switched = [r for r in rows if "switch_speedup" in r]
    if switched:
        lines.append(f"{'with the speed switches':<{width}}{'speed-up':>9}{'vs default':>11}"
                     f"{'fit speed-up':>13}{'fit vs default':>15}")
        for r in switched:
            lines.append(f"{r['name']:<{width}}{r['switch_speedup']:>9.2f}"
                         f"{cell(r, 'speedup_vs_default', 11)}"
                         f"{cell(r, 'fit_switch_speedup', 13)}"
                         f"{cell(r, 'fit_speedup_vs_default', 15)}")
        lines.append("speed-up: examples/s with the switches over the same setting without; "
                     "vs default: that speed-up over the one the default strategy (1 process) "
                     "gets from the same switches; fit: the same by the whole fit's seconds "
                     "(without over with).")
    return "\n".join(lines)


def _transport(row):
    """The transport a row's gradients took, as measured, else as its options ask."""
    return row.get("transport", row["options"].get("transport", "tensorflow"))


def _transport_cell(row):
    if "transport" not in row:
        return ""
    return f"  auto: {row['transport']}" if row.get("defaults") else f"  {row['transport']}"


def write_json(rows, path, **meta):
    """Writes the summary rows and `meta` to `path`."""
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": rows}, f, indent=2)


def plot_points(rows):
    """What the plot draws: `[(setting, measured ratio, predicted ratio or None), ...]`."""
    points = []
    for row in rows:
        if "ratio" not in row:
            continue
        predicted = None
        if "predicted_step_seconds" in row and row.get("step_seconds"):
            predicted = row["ratio"] * row["step_seconds"] / row["predicted_step_seconds"]
        points.append((row["name"], row["ratio"], predicted))
    return points


def write_plot(rows, path):
    """Plots each setting's examples/s as a ratio to one process, beside the cost
    model's prediction, with the 1.0 line of the baseline, to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = plot_points(rows)
    figure, axes = plt.subplots(figsize=(9, 1.5 + 0.38 * max(len(points), 1)))
    positions = range(len(points))
    height = 0.38
    axes.barh([y - height / 2 for y in positions], [p[1] for p in points], height,
              color="tab:blue", label="measured")
    predicted = [(y, p[2]) for y, p in zip(positions, points) if p[2] is not None]
    if predicted:
        axes.barh([y + height / 2 for y, _ in predicted], [v for _, v in predicted], height,
                  color="none", edgecolor="tab:orange", hatch="//",
                  label="cost model's prediction")
    for y, (_, ratio, _) in zip(positions, points):
        axes.text(ratio, y - height / 2, f" {ratio:.2f}", va="center", fontsize=7)
    axes.axvline(1.0, color="black", linestyle="--", linewidth=1,
                 label="one process (1.0)")
    axes.set_yticks(list(positions), [p[0] for p in points], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("examples/s over one process of as many threads and the same precision")
    axes.set_xlim(0, 1.15 * max([1.0] + [v for p in points for v in p[1:] if v is not None]))
    axes.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3,
                frameon=False)
    axes.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
