"""SLURM's compressed host lists and task counts, expanded in plain Python.

`scontrol show hostnames` is not on every machine that runs TensorFlow (a container, a test).
"""

import itertools
import re

__all__ = ["HostlistError", "expand_hostlist", "expand_tasks_per_node"]

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


class HostlistError(ValueError):
    """A SLURM host list or task count that does not parse."""


def _split_top_level(text):
    """Splits at commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(
                    f"A SLURM host list cannot nest brackets. Received: {text!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(
                    f"A SLURM host list has a ']' without its '['. Received: {text!r}")
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"A SLURM host list has an unclosed '['. Received: {text!r}")
    parts.append(text[start:])
    return parts


def _expand_brackets(body, text):
    values = []
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise HostlistError(
                f"A SLURM host list range must be 'N' or 'N-M'. Received: [{body}] in {text!r}")
        first, last = match.group(1), match.group(2) or match.group(1)
        if int(last) < int(first):
            raise HostlistError(
                f"A SLURM host list range must not run backwards. Received: [{body}] in {text!r}")
        width = len(first) if first.startswith("0") else 0
        values += [str(n).zfill(width) for n in range(int(first), int(last) + 1)]
    return values


def expand_hostlist(text):
    """Expands a SLURM host list (as in `SLURM_JOB_NODELIST`) into host names, in order.

    Ranges keep their zero padding; several bracket groups in one name give every
    combination. Raises `HostlistError` for unbalanced brackets, a bad range or an empty name.

    Example:

    ```python
    expand_hostlist("node[01-03,07],gpu-a1")
    # ['node01', 'node02', 'node03', 'node07', 'gpu-a1']
    ```
    """
    if not isinstance(text, str) or not text.strip():
        raise HostlistError(f"A SLURM host list must name at least one host. Received: {text!r}")
    hosts = []
    for part in _split_top_level(text.strip()):
        pieces = re.split(r"\[([^\]]*)\]", part.strip())
        if not part.strip():
            raise HostlistError(f"A SLURM host list has an empty name. Received: {text!r}")
        choices = [[p] if i % 2 == 0 else _expand_brackets(p, text)
                   for i, p in enumerate(pieces)]
        hosts += ["".join(combination) for combination in itertools.product(*choices)]
    return hosts


def expand_tasks_per_node(text):
    """Expands SLURM's tasks per node into one count per node: `"2(x3),1"` is `[2, 2, 2, 1]`.

    Raises `HostlistError` for an item that is not `N` or `N(xK)`.
    """
    counts = []
    for item in str(text).split(","):
        match = _COUNT.match(item.strip())
        if not match:
            raise HostlistError(
                f"SLURM tasks per node must be items like '2' or '2(x3)'. Received: {text!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts
