"""The 8x8 handwritten digits the main job and the guides train on, bundled (no download):
the test set of Alpaydin and Kaynak's "Optical Recognition of Handwritten Digits" (UCI
Machine Learning Repository, 1998, doi:10.24432/C50P49, CC BY 4.0)."""

import importlib.resources

import numpy as np

__all__ = ["load_digits"]


def load_digits():
    """Returns `(images, labels)`, uint8 arrays of shape (1797, 64) and (1797,): each row an
    8x8 image, row by row, of counts in 0..16, each label a digit 0..9."""
    with importlib.resources.files(__package__).joinpath("digits.npz").open("rb") as file:
        with np.load(file, allow_pickle=False) as data:
            return data["images"], data["labels"]
