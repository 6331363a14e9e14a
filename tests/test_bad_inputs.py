"""Walks the bad-input matrix of docs/reliability.md: each call fails with its error."""

import pathlib
import re

import pytest
import tensorflow as tf

from support import matrix_namespace

_DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "reliability.md"
_ROW = re.compile(r"^\| (?P<area>[^|]+) \| `(?P<call>.+)` \| `(?P<type>\w+)`: (?P<start>.+) \|$")


def _rows():
    text = _DOC.read_text().split("## Bad-input matrix", 1)[1].split("\n## ", 1)[0]
    rows = [_ROW.match(line) for line in text.splitlines() if line.startswith("| ")]
    return [r.groupdict() for r in rows if r]


ROWS = _rows()


def test_the_matrix_is_read_whole():
    lines = [line for line in _DOC.read_text().split("## Bad-input matrix", 1)[1]
             .split("\n## ", 1)[0].splitlines() if line.startswith("| ") and "`" in line]
    assert len(ROWS) == len(lines) >= 60


@pytest.fixture(scope="module")
def namespace():
    tf.constant(0)  # the runtime has started, as in any real program by then
    return matrix_namespace.namespace()


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['area']}: {r['call'][:60]}" for r in ROWS])
def test_bad_input_gives_its_documented_error(row, namespace):
    with pytest.raises(Exception) as caught:
        eval(row["call"], namespace)  # noqa: S307 - the calls are this repository's own table
    error = caught.value
    message = error.args[0] if isinstance(error, KeyError) else str(error)
    assert type(error).__name__ == row["type"], f"{type(error).__name__}: {message}"
    start = row["start"].replace("\\|", "|").replace("\\[", "[").replace("\\]", "]")
    assert message.startswith(start), message
