"""The `mgpu-tf` command's entry point: the top-level parser and `main`."""

import argparse
import sys

from mgpu_tf.base.version import __version__
from mgpu_tf.cli import bench as bench_cmd
from mgpu_tf.cli import calibrate as calibrate_cmd
from mgpu_tf.cli import env as env_cmd
from mgpu_tf.cli import k8s as k8s_cmd
from mgpu_tf.cli import launch as launch_cmd
from mgpu_tf.cli import parsing
from mgpu_tf.cli import plan as plan_cmd
from mgpu_tf.cli import test as test_cmd
from mgpu_tf.cli import top as top_cmd

__all__ = ["main"]

_COMMANDS = (launch_cmd, env_cmd, k8s_cmd, calibrate_cmd, bench_cmd, plan_cmd, top_cmd, test_cmd)


def _parser():
    return _parsers()[0]


def _parsers():
    """Returns the top-level parser and `{sub-command name: its parser}`."""
    parser = argparse.ArgumentParser(
        prog="mgpu-tf", description="Multi-device training for TensorFlow and Keras 3.")
    parser.add_argument("--version", action="version", version=f"mgpu-tf {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND",
                                       parser_class=parsing.CommandParser)
    commands = {}
    for module in _COMMANDS:
        command = module.add_parser(subparsers)
        commands[command.prog.split()[-1]] = command
    return parser, commands


def main(argv=None):
    """Runs `mgpu-tf ARGS`; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser, commands = _parsers()
    name = next((word for word in argv if not word.startswith("-")), None)
    if name is not None and name not in commands:
        parser.error(f"the command must be one of {', '.join(commands)}. Received: "
                     f"{name!r}.{parsing.did_you_mean(name, commands)}")
    if name is not None:
        parsing.refuse_misspelt(commands[name], argv[argv.index(name) + 1:])
    # The sub-command's parser, not the top-level one, answers a wrong option.
    args, unknown = parser.parse_known_args(argv)
    if args.command is None:
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        parser.print_help()
        return 2
    command = getattr(args, "cmd", None)
    if unknown or (command and "--" not in argv):
        parsing.report_unknown(commands[args.command], unknown, argv, command)
    return args.run(args)
