"""`mgpu-tf launch`: run a command as N local workers, each with its own TF_CONFIG.

Start N local worker processes of COMMAND, each with a TF_CONFIG on free ports, prefix
their output with the worker index, and stop them all when one fails or on Ctrl-C. With
--workers MIN:MAX and --discovery_script, run as many as the script offers (elastic).
Example: mgpu-tf launch --workers 2 -- python -m mgpu_tf.train --strategy=multi_worker
"""

import signal
import sys

from mgpu_tf.cli import parsing
from mgpu_tf.cluster import elastic
from mgpu_tf.cluster import launcher

__all__ = ["add_parser", "launch_command"]


def add_parser(subparsers):
    parser = parsing.add_command(subparsers, launch_command, __doc__)
    parser.add_argument("--workers", required=True,
                        help="number of workers N, or MIN:MAX with --discovery_script")
    parser.add_argument("--port", type=int, default=None,
                        help="first port (workers use PORT, PORT+1, ...); default: free ports")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address the workers use (default 127.0.0.1)")
    parser.add_argument("--grace_seconds", type=float, default=10.0,
                        help="seconds a stopped worker gets before SIGKILL (default 10)")
    parser.add_argument("--max_restarts", type=int, default=0,
                        help="start the whole group again after a failure, up to N times; "
                        "each start sees MGPU_TF_RESTART=0,1,... (default 0)")
    parser.add_argument("--discovery_script", default=None,
                        help="executable printing how many workers can run now (or one "
                        "host[:slots] per line); the group shrinks after a failure and "
                        "grows at the next backup, within --workers MIN:MAX")
    parser.add_argument("--discovery_seconds", type=float, default=1.0,
                        help="how often the discovery script is asked (default 1)")
    parser.add_argument("--discovery_timeout", type=float, default=600.0,
                        help="seconds to wait for MIN workers before failing (default 600)")
    parser.add_argument("cmd", nargs="*", metavar="-- COMMAND",
                        help="the command each worker runs")
    return parser


def _exit_on_sigterm(signum, frame):
    # Outside a running group (checks, waiting for workers): stop as SIGTERM reports, 143.
    raise SystemExit(128 + signum)


def launch_command(args):
    try:
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    except ValueError:  # not the main thread
        previous = None
    try:
        minimum, maximum = elastic.parse_workers(args.workers)
        if args.discovery_script is not None:
            return elastic.launch_elastic(
                args.cmd, (minimum, maximum), args.discovery_script, port=args.port,
                host=args.host, grace_seconds=args.grace_seconds,
                max_restarts=args.max_restarts, poll_seconds=args.discovery_seconds,
                wait_seconds=args.discovery_timeout)
        if minimum != maximum:
            raise launcher.LaunchError(
                "`--workers MIN:MAX` needs --discovery_script, which says how many can run. "
                f"Received: --workers {args.workers} alone. Add --discovery_script S, or "
                "give one count.")
        return launcher.launch(args.cmd, maximum, port=args.port, host=args.host,
                               grace_seconds=args.grace_seconds,
                               max_restarts=args.max_restarts)
    except launcher.LaunchError as error:
        print(f"mgpu-tf launch: {error}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
