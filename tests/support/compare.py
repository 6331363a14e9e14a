"""Comparing trained weights with a reference, and reading the weights a worker saved."""

import numpy as np

__all__ = ["relative_difference", "saved_weights"]


def relative_difference(weights, expected):
    """The largest difference in any weight, relative to the largest expected weight.

    `max |w - e| / max |e|` over all arrays together: one scale for the whole model,
    so a bias that is near zero does not turn rounding into a large ratio.

    Args:
        weights: a list of arrays.
        expected: the reference, arrays of the same shapes in the same order.
    """
    assert len(weights) == len(expected), (len(weights), len(expected))
    for w, e in zip(weights, expected):
        assert np.shape(w) == np.shape(e), (np.shape(w), np.shape(e))
    w = np.concatenate([np.ravel(v) for v in weights]).astype("float64")
    e = np.concatenate([np.ravel(v) for v in expected]).astype("float64")
    return float(np.max(np.abs(w - e)) / np.max(np.abs(e)))


def saved_weights(path):
    """The arrays of an `.npz` file written by `np.savez(path, *arrays, **extras)`, in order."""
    with np.load(path) as data:
        return [data[f"arr_{i}"] for i in range(sum(k.startswith("arr_") for k in data.files))]
