"""`mgpu-tf calibrate`: time a job as each of N local workers, or take measured speeds, and
propose shard weights.

Run COMMAND as each of N local workers, alone and one after another, several times (each run
must print 'examples_per_sec=X' and use a local strategy), and print each worker's median speed,
its spread over the runs and the shard weights that match: MGPU_TF_SHARD_WEIGHTS for the
workers, SPEED for mgpu-tf k8s --node_pool. A spread above --max_spread, or a run that reports
'timed_seconds=Y' below --min_seconds, is refused. For workers on other machines, run the same
command on each and pass the figures: mgpu-tf calibrate --speeds 812,410
"""

import sys

from mgpu_tf.cli import parsing
from mgpu_tf.cluster import calibrate
from mgpu_tf.cluster import launcher

__all__ = ["add_parser", "calibrate_command"]


def add_parser(subparsers):
    parser = parsing.add_command(subparsers, calibrate_command, __doc__)
    parser.add_argument("--workers", type=int, default=None, help="number of local workers")
    parser.add_argument("--speeds", default=None,
                        help="comma-separated examples/sec measured elsewhere, one per worker")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each worker, at least 2 (default 3)")
    parser.add_argument("--max_spread", type=float, default=0.1,
                        help="largest (fastest - slowest run) / median accepted for a worker "
                        "(default 0.1: 10%%)")
    parser.add_argument("--min_seconds", type=float, default=1.0,
                        help="least timed work a run may report with 'timed_seconds=Y' "
                        "(default 1)")
    parser.add_argument("--timeout_seconds", type=float, default=600.0,
                        help="seconds a run may take (default 600)")
    parser.add_argument("--verbose", action="store_true", help="show the workers' output")
    parser.add_argument("cmd", nargs="*", metavar="-- COMMAND",
                        help="the job each worker runs")
    return parser


def _given_speeds(args):
    """Returns the speeds of --speeds, or None to measure; raises for bad arguments."""
    if args.speeds is None:
        if args.workers is None:
            raise launcher.LaunchError(
                "Pass --workers N with a command to measure, or --speeds measured elsewhere. "
                "Received: neither.")
        return None
    if args.workers is not None or args.cmd:
        raise launcher.LaunchError(
            "Pass --speeds, or --workers with a command, not both. Received: "
            f"--speeds={args.speeds}, --workers={args.workers}, command={args.cmd!r}")
    try:
        speeds = [float(s) for s in args.speeds.split(",")]
        calibrate.propose_weights(speeds)
    except (ValueError, calibrate.CalibrationError):
        raise launcher.LaunchError(
            "--speeds must be comma-separated positive numbers, one per worker. "
            f"Received: --speeds={args.speeds!r}") from None
    return speeds


def calibrate_command(args):
    spreads = None
    try:
        speeds = _given_speeds(args)
        if speeds is None:
            calibrate.check_calibration(
                args.cmd, args.workers, repeats=args.repeats, max_spread=args.max_spread,
                min_seconds=args.min_seconds, timeout_seconds=args.timeout_seconds)
            print(f"calibrating {args.workers} workers, one after another, {args.repeats} "
                  f"runs each: {' '.join(args.cmd)}", flush=True)
            result = calibrate.calibrate(
                args.cmd, args.workers, repeats=args.repeats, max_spread=args.max_spread,
                min_seconds=args.min_seconds, timeout_seconds=args.timeout_seconds,
                output=sys.stdout if args.verbose else None, progress=sys.stderr)
            speeds, spreads = result.speeds, result.spreads
    except launcher.LaunchError as error:
        print(f"mgpu-tf calibrate: {_flag_names(error)}", file=sys.stderr)
        return 2
    except calibrate.CalibrationError as error:
        print(f"mgpu-tf calibrate: {error}", file=sys.stderr)
        return 1
    weights = calibrate.propose_weights(speeds)
    print(f"{'worker':<8}{'examples/sec':>14}{'spread':>8}{'weight':>9}")
    for i, (speed, weight) in enumerate(zip(speeds, weights)):
        spread = "-" if spreads is None else f"{spreads[i]:.1%}"
        print(f"{i:<8}{speed:>14.1f}{spread:>8}{weight:>9g}")
    print("MGPU_TF_SHARD_WEIGHTS=" + ",".join(f"{w:g}" for w in weights))
    return 0


def _flag_names(error):
    """The message, with `calibrate`'s argument names spelt as this command's flags."""
    text = str(error)
    for name in ("repeats", "max_spread", "min_seconds", "timeout_seconds"):
        text = text.replace(f"`{name}`", f"--{name}").replace(f"{name}=", f"--{name}=")
    return text
