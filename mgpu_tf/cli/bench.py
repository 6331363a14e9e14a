"""`mgpu-tf bench`: measure examples/s on 1 and N simulated devices, local workers and
pipeline stages, each communication option on and off.

Trains one model (an MLP, or a compute-bound CNN with --model cnn) under each setting in
fresh processes (N workers of one thread against one process of N threads, with default
options and each communication option, N devices, N pipeline stages), alternating rounds;
prints medians of the timed epoch and of the whole fit (tracing and compiles included) with
the cost model's figures. Writes OUT/bench.json and OUT/bench.png.
Example: mgpu-tf bench --workers 2 --rounds 3
"""

import dataclasses
import os
import sys
import time

from mgpu_tf.cli import parsing
from mgpu_tf.planner import bench as bench_lib

__all__ = ["add_parser", "bench_command"]


def add_parser(subparsers):
    parser = parsing.add_command(subparsers, bench_command, __doc__)
    parser.add_argument("--workers", type=int, default=2,
                        help="N: devices, workers and stages to compare with one (default 2)")
    parser.add_argument("--global_batch_size", "--global-batch", type=int, default=256,
                        dest="global_batch", metavar="B",
                        help="examples per step over all replicas (default 256)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each setting (default 3)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per run, after an untimed epoch of as many; the whole "
                        "fit of both is timed too (default 30)")
    parser.add_argument("--model", default="mlp",
                        help=f"the model: {' or '.join(bench_lib.MODELS)} (default mlp): an MLP "
                        "of 784 inputs, or 32x32x3 images through 3x3 Conv2D layers of 32, 64 "
                        "and 128 filters")
    parser.add_argument("--width", type=int, default=None,
                        help="MLP width (default 1024; --model mlp only)")
    parser.add_argument("--depth", type=int, default=None,
                        help="Dense layers (default 4; --model mlp only)")
    parser.add_argument("--only", default=None,
                        help="comma-separated setting keys to run (default: all), with "
                        "processN, the ratios' baseline; see the keys with --list")
    parser.add_argument("--jit_compile", default=None,
                        help="also run the main settings with model.compile(jit_compile=...): "
                        "true, false or auto (default: not at all)")
    parser.add_argument("--steps_per_execution", type=int,
                        default=None, help="also run the main settings with "
                        "model.compile(steps_per_execution=N) (default: not at all)")
    parser.add_argument("--list", action="store_true", help="list the settings and exit")
    parser.add_argument("--out", default=".", help="folder for bench.json and bench.png")
    return parser


def _check(args):
    if args.model not in bench_lib.MODELS:
        raise ValueError(f"--model must be one of {', '.join(bench_lib.MODELS)}. Received: "
                         f"--model={args.model!r}.")
    for name in ("width", "depth"):
        if args.model != "mlp" and getattr(args, name) is not None:
            raise ValueError(f"--{name} applies to --model mlp only. Received: --{name}="
                             f"{getattr(args, name)} with --model={args.model}. Drop --{name}.")
    for name in ("workers", "global_batch", "rounds", "steps", "width", "depth"):
        value = getattr(args, name)
        if value is None:
            continue
        least = 2 if name in ("workers", "depth") else 1
        if value < least:
            flag = "--global_batch_size" if name == "global_batch" else "--" + name
            raise ValueError(f"{flag} must be at least {least}. Received: {flag}={value}")
    if args.global_batch % args.workers:
        low = args.global_batch - args.global_batch % args.workers
        raise ValueError(
            f"--global_batch_size must be divisible by --workers ({args.workers}). Received: "
            f"--global_batch_size={args.global_batch}. Use {low or args.workers} or "
            f"{low + args.workers}.")
    settings = bench_lib.default_settings(args.workers, global_batch=args.global_batch)
    switches = _switches(args)
    if switches:
        settings += bench_lib.switched(settings, **switches)
    if args.only:
        keys = [k.strip() for k in args.only.split(",") if k.strip()]
        known = [s.key for s in settings]
        unknown = [k for k in keys if k not in known]
        if unknown or not keys:
            raise ValueError(f"--only names unknown settings {unknown}. Received: "
                             f"--only={args.only!r}. Known: {', '.join(known)}.")
        # The ratio column is taken against one process of N threads of the same precision.
        keys += [_baseline(s) for s in settings if s.key in keys]
        if switches:
            # A twin needs its setting, and every twin the default strategy's pair.
            keys += [s.base for s in settings if s.key in keys and s.base]
            keys += [f"{k}+switches" for k in keys] + ["processN", "processN+switches"]
        settings = [s for s in settings if s.key in keys]
    return settings


def _baseline(setting):
    """The key of the row `setting`'s ratio is taken against (see `bench_lib.summarise`)."""
    mixed = setting.mode != "process" and "mixed_bfloat16" in setting.group
    return "processN-mixed_bfloat16" if mixed else "processN"


def _switches(args):
    """`{"jit_compile", "steps_per_execution"}` for the twins, or None without the flags."""
    if args.jit_compile is None and args.steps_per_execution is None:
        return None
    from mgpu_tf.compat import keras_steps

    try:
        jit = keras_steps.check_jit_compile(
            "auto" if args.jit_compile is None else args.jit_compile)
        steps = keras_steps.check_steps_per_execution(
            1 if args.steps_per_execution is None else args.steps_per_execution)
    except (TypeError, ValueError) as error:
        flag = "--jit_compile" if "jit_compile" in str(error) else "--steps_per_execution"
        raise ValueError(f"{flag}: {error}") from None
    return {"jit_compile": jit, "steps_per_execution": steps}


def _spec(args):
    """The `ModelSpec` of `--model`, `--width` and `--depth`."""
    given = {name: getattr(args, name) for name in ("width", "depth")
             if getattr(args, name) is not None}
    return bench_lib.ModelSpec(kind=args.model, **given)


def bench_command(args):
    from mgpu_tf.cli import bench_scaling  # trains: loaded only for a run

    try:
        settings = _check(args)
    except ValueError as error:
        print(f"mgpu-tf bench: {error}", file=sys.stderr)
        return 2
    if args.list:
        width = max(len(s.key) for s in settings) + 2
        for s in settings:
            print(f"{s.key:<{width}}{s.name}")
        return 0
    spec = _spec(args)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"model: {spec.label}, global batch {args.global_batch}, "
          f"{args.steps} timed steps of a {2 * args.steps}-step fit, {args.rounds} alternating "
          f"rounds, load {load:.2f}",
          flush=True)
    started = time.time()
    rows = bench_scaling.run_benchmark(settings, rounds=args.rounds, steps=args.steps,
                                       spec=spec, progress=sys.stderr)
    print(bench_lib.format_table(rows))
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, "bench.json")
    png_path = os.path.join(args.out, "bench.png")
    bench_lib.write_json(rows, json_path, workers=args.workers, global_batch=args.global_batch,
                         rounds=args.rounds, steps=args.steps, model=spec.kind,
                         spec=dataclasses.asdict(spec), load_before=load,
                         load_after=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
                         seconds=time.time() - started)
    try:
        bench_lib.write_plot(rows, png_path)
    except ImportError:
        print("mgpu-tf bench: no plot: matplotlib is missing (pip install 'mgpu_tf[bench]')",
              file=sys.stderr)
        png_path = None
    print(f"wrote {json_path}" + (f" and {png_path}" if png_path else ""))
    return 0
