"""`mgpu-tf test`: train briefly under each strategy this machine can run and check each
ends on the default strategy's weights.

Runs each row in fresh processes (default, mirrored, 2 local workers, the tcp transport,
model_parallel, sharded optimizer state) on all GPUs, or 2 simulated devices without them,
and prints a table: the devices, whether the trained weights match the default run's to
rounding (with the largest difference), examples/s, and on GPUs whether NCCL, mixed
precision and XLA work. Exits with 1 when a row fails, naming it.
Example: mgpu-tf test --json
"""

import json
import os
import sys
import time

from mgpu_tf.cli import parsing

__all__ = ["ROWS", "add_parser", "test_command"]

# name -> (strategy, options, where it runs: "one" device, the local "devices", 2 "workers").
ROWS = {
    "default": ("default", {}, "one"),
    "mirrored": ("mirrored", {}, "devices"),
    # TensorFlow's collectives named: "auto" would take the tcp ring, the next row's.
    "multi_worker": ("multi_worker", {"transport": "tensorflow"}, "workers"),
    "tcp": ("multi_worker", {"transport": "tcp"}, "workers"),
    "model_parallel": ("model_parallel", {"microbatches": 2}, "devices"),
    "sharded": ("mirrored", {"shard_optimizer_state": True}, "devices"),
}
_STAGES = 3  # the model's layers: model_parallel cannot use more devices
_STEPS, _EPOCHS = 10, 2  # the first epoch traces the step, the last is timed
_SKEW = 1.01  # --skew_row's learning-rate factor


def add_parser(subparsers):
    parser = parsing.add_command(subparsers, test_command, __doc__)
    parser.add_argument("--only", default=None, metavar="ROWS",
                        help="comma-separated rows to run, the default row always among them "
                             f"(default: all: {', '.join(ROWS)})")
    parser.add_argument("--json", action="store_true",
                        help="print the rows as JSON, for a bug report, instead of the table")
    parser.add_argument("--weights_out", default=None, metavar="FILE",
                        help="also write each row's trained weights to FILE (.npz, arrays "
                             "named ROW/INDEX), to compare them elsewhere")
    parser.add_argument("--timeout_seconds", type=float, default=300, metavar="S",
                        help="how long one row may take (default 300)")
    parser.add_argument("--fail_row", default=None, metavar="ROW",
                        help="make ROW's process fail before training, to see how a failure "
                             "is reported")
    parser.add_argument("--skew_row", default=None, metavar="ROW",
                        help=f"train ROW with a learning rate {_SKEW:g} times the default "
                             "run's, to see the tolerance reject a 1%% wrong update")
    return parser


def _check(args):
    """The rows to run, the default row first; raises ValueError for a bad option."""
    names = list(ROWS)
    if args.only is not None:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in ROWS]
        if unknown or not names:
            raise ValueError(f"--only must name rows among {', '.join(ROWS)}. Received: "
                             f"--only={args.only!r}. Fix: --only=mirrored,tcp, for example.")
        names = ["default"] + [n for n in ROWS if n in names and n != "default"]
    for flag, value in (("--fail_row", args.fail_row), ("--skew_row", args.skew_row)):
        if value is not None and value not in names:
            raise ValueError(f"{flag} must name a row that runs: {', '.join(names)}. "
                             f"Received: {flag}={value!r}.")
    if args.skew_row == "default":
        raise ValueError("--skew_row cannot be the default row, the reference the others are "
                         "compared with. Received: --skew_row='default'. Name another row.")
    if args.weights_out is not None:
        folder = os.path.dirname(os.path.abspath(args.weights_out))
        if not args.weights_out.endswith(".npz") or not os.path.isdir(folder):
            raise ValueError(f"--weights_out must be a .npz file in an existing folder. "
                             f"Received: --weights_out={args.weights_out!r}.")
    if not args.timeout_seconds > 0:
        raise ValueError(f"--timeout_seconds must be positive. Received: "
                         f"--timeout_seconds={args.timeout_seconds}.")
    return names


def _payload(name, args, hardware):
    """What row `name`'s process gets; without `hardware` (the first row), it looks."""
    from mgpu_tf.cli import proof

    strategy, options, where = ROWS[name]
    hardware = hardware or {"device_type": None, "devices": None, "simulate": 0,
                            "global_batch": None}
    count, simulate = hardware["devices"], hardware["simulate"]
    if where != "devices":
        count, simulate = None, 0
    elif strategy == "model_parallel":
        count = min(count, _STAGES)
    return {"name": name, "strategy": strategy, "options": options, "devices": count,
            "simulate": simulate, "workers": proof.WORKERS if where == "workers" else 1,
            # The local workers share this machine's devices: they train on the CPU.
            "device_type": "CPU" if where == "workers" else hardware["device_type"],
            "steps": _STEPS, "epochs": _EPOCHS, "global_batch": hardware["global_batch"],
            "learning_rate_scale": _SKEW if name == args.skew_row else 1.0,
            "fail": name == args.fail_row}


def _run(payload, timeout):
    """The row's result from its fresh process(es), or `{"error": ...}`."""
    from mgpu_tf.cli import proof
    from mgpu_tf.planner.bench import runner

    try:
        # Local workers get the CPU only, as the runner gives it; the others the GPUs as they are.
        return runner.run_in_fresh_process(proof.train_row, payload, workers=payload["workers"],
                                           gpus=payload["workers"] == 1, timeout=timeout,
                                           label=f"row {payload['name']}")
    except runner.FreshProcessError as error:
        return {"error": str(error)}


def _difference(weights, reference):
    """The largest difference in any weight over the largest reference weight."""
    import numpy as np

    got = np.concatenate([np.ravel(w) for w in weights])
    want = np.concatenate([np.ravel(w) for w in reference])
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def _judge(row, result, reference, bound):
    """The row as the table and the JSON show it."""
    strategy, options, _ = ROWS[row]
    out = {"row": row, "strategy": " ".join([strategy] + [f"{k}={v}" for k, v in options.items()]),
           "devices": result.get("devices"), "replicas": result.get("replicas"),
           "examples_per_sec": result.get("examples_per_sec"), "max_difference": None,
           "same_as_default": None, "error": result.get("error")}
    for switch in ("nccl", "mixed_precision", "xla"):
        if switch in result:
            out[switch] = result[switch]
            if result[switch].startswith("no:") and not out["error"]:
                out["error"] = f"{switch} fails: {result[switch][4:]}"
    if out["error"] is None and row != "default":
        if reference is None:
            out["error"] = "no reference: the default row failed"
        else:
            out["max_difference"] = _difference(result["weights"], reference)
            out["same_as_default"] = out["max_difference"] <= bound
            if not out["same_as_default"]:
                out["error"] = (f"the trained weights differ from the default run's by "
                                f"{out['max_difference']:.2e}, above the tolerance {bound:.2e}")
    elif out["error"] is None:
        out["same_as_default"], out["max_difference"] = True, 0.0
    return out


def _table(rows, gpu):
    head = ["row", "strategy", "devices", "same as default", "examples/s"]
    if gpu:
        head += ["NCCL", "mixed precision", "XLA"]
    lines = [head]
    for r in rows:
        same = ("error" if r["same_as_default"] is None
                else f"{'yes' if r['same_as_default'] else 'no'} ({r['max_difference']:.1e})")
        speed = f"{r['examples_per_sec']:.0f}" if r["examples_per_sec"] else "-"
        line = [r["row"], r["strategy"], r["devices"] or "-", same, speed]
        if gpu:
            line += [r.get(s, "-").split(":")[0] for s in ("nccl", "mixed_precision", "xla")]
        lines.append(line)
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(f"{str(c):<{w}}" for c, w in zip(line, widths)).rstrip()
                     for line in lines)


def _run_rows(names, args):
    """Runs the rows in turn, showing each as it ends; returns the run as `--json` shows it,
    and `{"ROW/INDEX": weight}`."""
    from mgpu_tf.cli import proof

    started = time.time()
    rows, reference, hardware, bound, weights = [], None, None, None, {}
    for index, name in enumerate(names):
        start = time.time()
        # The default row runs first, and its process says which devices there are.
        result = _run(_payload(name, args, hardware), args.timeout_seconds)
        if hardware is None:
            hardware = result.get("hardware") or proof.hardware(0)
            bound = proof.tolerance(proof.Problem(_STEPS, hardware["global_batch"]), _EPOCHS)
            reference = result.get("weights")
        rows.append(_judge(name, result, reference, bound))
        weights.update({f"{name}/{i}": w for i, w in enumerate(result.get("weights", []))})
        print(f"mgpu-tf test: [{index + 1}/{len(names)}] {name}: "
              f"{'ok' if rows[-1]['error'] is None else 'FAILED'} in {time.time() - start:.1f} s",
              file=sys.stderr, flush=True)
    run = {"tolerance": bound, "device_type": hardware["device_type"],
           "global_batch": hardware["global_batch"], "steps": _STEPS * _EPOCHS,
           "seconds": time.time() - started, "rows": rows}
    return run, weights


def test_command(args):
    try:
        names = _check(args)
    except ValueError as error:
        print(f"mgpu-tf test: {error}", file=sys.stderr)
        return 2
    run, weights = _run_rows(names, args)
    if args.weights_out is not None:
        import numpy as np

        np.savez(args.weights_out, **{k: np.asarray(w, "float32") for k, w in weights.items()})
    if args.json:
        print(json.dumps(run, indent=2))
    else:
        print(_table(run["rows"], run["device_type"] == "GPU"))
        print(f"tolerance: {run['tolerance']:.1e} (the largest weight difference over the "
              f"largest weight after {run['steps']} steps of {run['global_batch']} examples)")
    failed = [r for r in run["rows"] if r["error"]]
    for r in failed:
        print(f"mgpu-tf test: row {r['row']} failed: {r['error']}", file=sys.stderr)
    return 1 if failed else 0
