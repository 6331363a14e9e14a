"""What every `mgpu-tf` sub-command's parser shares: its name, summary, description and spelling.

A command module's docstring is its help: the first line reads "`mgpu-tf NAME`:
summary.", and the paragraph after it is what `mgpu-tf NAME --help` says first.

Options are spelt with underscores, as the main job's absl flags are
(`--global_batch_size`); each also answers to its dashed spelling
(`--global-batch-size`); usage lines show the first. A wrong option is answered by
the sub-command's usage, not the top-level one (`report_unknown`).
"""

import argparse

__all__ = ["CommandParser", "add_command", "report_unknown"]


class CommandParser(argparse.ArgumentParser):
    """A sub-command's parser: `--a_b` also answers to `--a-b`, and no abbreviations.

    Abbreviations are off because a prefix would be ambiguous between the two
    spellings, and because a prefix that matches silently surprises.
    """

    runs_command = False  # whether it takes a command after `--` (a `cmd` positional)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def add_argument(self, *names, **kwargs):
        dashed = [n.replace("_", "-") for n in names if n.startswith("--") and "_" in n]
        action = super().add_argument(*names, *[n for n in dashed if n not in names], **kwargs)
        self.runs_command = self.runs_command or action.dest == "cmd"
        return action


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


def report_unknown(parser, unknown, argv):
    """Exits through `parser.error` (the sub-command's usage) for `unknown` arguments.

    A sub-command that runs a command (its `cmd` positional) adds a hint when `argv`
    holds no `--`: the options were most likely the command's.
    """
    message = f"unrecognized arguments: {' '.join(unknown)}."
    if getattr(parser, "runs_command", False) and "--" not in argv:
        message += (f" If they belong to the command, put the command after `--`: "
                    f"{parser.prog} [OPTIONS] -- COMMAND [ITS OPTIONS]")
    parser.error(message)
