"""`mgpu-tf env`: what a bug report needs to know about this machine."""

__all__ = ["add_parser", "env_command"]


def add_parser(subparsers):
    parser = subparsers.add_parser("env", help="print versions, devices, the auto strategy and TF_CONFIG")
    parser.set_defaults(run=env_command)
    return parser


def env_command(args):
    raise NotImplementedError
