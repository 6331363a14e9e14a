"""What every `mgpu-tf` sub-command's parser shares: its name, summary, description and spelling.

A command module's docstring is its help ("`mgpu-tf NAME`: summary." then the paragraph
`--help` shows first). Options are spelt with underscores, as absl flags are, and
also answer to dashes.

Design: docs/design.md#the-command-line
"""

import argparse
import difflib

__all__ = ["CommandParser", "add_command", "did_you_mean", "refuse_misspelt", "report_unknown"]


class CommandParser(argparse.ArgumentParser):
    """A sub-command's parser: `--a_b` also answers to `--a-b`, and no abbreviations.

    A prefix would be ambiguous between the two spellings, and a prefix that matches surprises.
    """

    runs_command = False  # whether it takes a command after `--` (a `cmd` positional)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        self.options = {}  # every spelling of an option: (its first spelling, takes a value)
        super().__init__(*args, **kwargs)

    def add_argument(self, *names, **kwargs):
        dashed = [n.replace("_", "-") for n in names if n.startswith("--") and "_" in n]
        action = super().add_argument(*names, *[n for n in dashed if n not in names], **kwargs)
        self.runs_command = self.runs_command or action.dest == "cmd"
        first = next((n for n in action.option_strings if n.startswith("--")), None)
        for name in action.option_strings:
            self.options[name] = (first or name, action.nargs != 0)
        return action


def add_command(subparsers, run, doc, *, raw=False):
    """Adds the sub-command that `run` (`NAME_command`) runs to `subparsers`; returns its parser.

    `doc` is the command module's docstring; `raw` keeps the description's line breaks.
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


def did_you_mean(word, choices):
    """`" Did you mean X?"` for the choice closest to a misspelt `word`, or `""`."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" Did you mean {close[0]}?" if close else ""


def refuse_misspelt(parser, words):
    """Exits through `parser.error` at the first `--option` of `words` that `parser` lacks.

    `words` are the sub-command's arguments; the scan ends at `--` or at the first word
    that is no option's value (the command, when one is given without `--`).
    """
    options = getattr(parser, "options", {})
    # The spelling `--help` shows is suggested, even for a near miss of the dashed one.
    shown = {first for first, _ in options.values()}
    value = False
    for word in words:
        name = word.partition("=")[0]
        if word == "--":
            return
        if word.startswith("--") and name not in options:
            parser.error(f"unrecognized arguments: {word}.{did_you_mean(name, shown)}")
        if word.startswith("-") and name in options:
            value = options[name][1] and "=" not in word
        elif value:
            value = False
        else:
            return


def report_unknown(parser, unknown, argv, command=()):
    """Exits through `parser.error` (the sub-command's usage) for arguments it cannot take.

    `unknown` are arguments no option took; `command` the words taken as the command.
    Without `--` in `argv`, a sub-command that runs a command refuses both alike.
    """
    fix = f"put the command after `--`: {parser.prog} [OPTIONS] -- COMMAND [ITS OPTIONS]"
    if getattr(parser, "runs_command", False) and "--" not in argv:
        if command:
            parser.error("the command must come after `--`, with or without options of "
                         f"its own. Received: {' '.join([*command, *unknown])}. Fix: {fix}")
        parser.error(f"unrecognized arguments: {' '.join(unknown)}. If they belong to the "
                     f"command, {fix}")
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}.")
