"""The `mgpu-tf` command's entry point: the top-level parser and `main`."""

import argparse
import sys

from mgpu_tf.cli import bench as bench_cmd
from mgpu_tf.cli import calibrate as calibrate_cmd
from mgpu_tf.cli import env as env_cmd
from mgpu_tf.cli import k8s as k8s_cmd
from mgpu_tf.cli import launch as launch_cmd
from mgpu_tf.cli import plan as plan_cmd

__all__ = ["main"]

_COMMANDS = (launch_cmd, env_cmd, k8s_cmd, calibrate_cmd, bench_cmd, plan_cmd)


def _parser():
    parser = argparse.ArgumentParser(
        prog="mgpu-tf", description="Multi-device training for TensorFlow and Keras 3."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _COMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv=None):
    """Runs `mgpu-tf ARGS`; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command is None:
        parser.print_help()
        return 2
    return args.run(args)
