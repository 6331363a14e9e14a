"""What the docs and docstrings say the code does, against the code."""

import pathlib
import re

import keras
import pytest

import mgpu_tf
from mgpu_tf.cluster import fit_callbacks

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _anchors(page):
    """The anchors of `page`'s headings, as mkdocs makes them."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in page.splitlines() if line.startswith("#")}


def test_make_strategys_options_point_to_a_table_that_exists():
    doc = mgpu_tf.make_strategy.__doc__
    [reference] = re.findall(r"docs/[\w/]+\.md#[\w-]+", doc)
    path, anchor = reference.split("#")
    page = (ROOT / path).read_text()
    assert anchor in _anchors(page), reference
    section = page.split("## Options", 1)[1]
    assert "| option | type |" in section and "| `timeout_seconds` |" in section


def test_the_refusal_quoted_in_reliability_is_the_one_fit_raises(tmp_path):
    page = (DOCS / "reliability.md").read_text()
    quoted = re.search(r"\n\n(    ValueError: Keras' ModelCheckpoint .*?)\n\n", page, re.S).group(1)
    with pytest.raises(ValueError) as raised:
        fit_callbacks.check_writers([keras.callbacks.ModelCheckpoint(str(tmp_path / "m.keras"))])
    # The page wraps the line at any character: compared without the white space.
    assert "".join(quoted.split()) == "".join(f"ValueError: {raised.value}".split())


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_no_page_says_keras_writers_are_turned_into_the_toolkits(page):
    # Multi-worker fit refuses Keras' ModelCheckpoint and TensorBoard (above): a page that
    # says they become the toolkit's, or run as it, promises what the code does not do.
    text = " ".join((DOCS / page).read_text().split())
    for claim in (r"which Keras' becomes", r"Keras' own `ModelCheckpoint`[^.]* are run as",
                  r"Keras' `ModelCheckpoint`[^.]* becomes"):
        assert not re.search(claim, text), (page, claim)
