"""What every `mgpu-tf` sub-command's parser shares: its name, summary and description.

A command module's docstring is its help: the first line reads "`mgpu-tf NAME`:
summary.", and the paragraph after it is what `mgpu-tf NAME --help` says first.
"""

import argparse

__all__ = ["add_command"]


def add_command(subparsers, run, doc, *, raw=False):
    """Adds the sub-command that `run` runs to `subparsers`; returns its parser.

    Args:
        subparsers: what `ArgumentParser.add_subparsers` returned.
        run: `NAME_command`, the function of the parsed arguments that runs the
            sub-command `NAME` and returns its exit code.
        doc: the command module's docstring (see the module docstring).
        raw: keep the description's line breaks. Defaults to `False`.
    """
    name = run.__name__.removesuffix("_command")
    first, _, rest = doc.strip().partition("\n\n")
    summary = " ".join(first.partition(": ")[2].split()).rstrip(".")
    description = rest.strip() if raw else " ".join(rest.split())
    parser = subparsers.add_parser(
        name, help=summary, description=description or summary,
        formatter_class=argparse.RawDescriptionHelpFormatter if raw else argparse.HelpFormatter)
    parser.set_defaults(run=run)
    return parser
