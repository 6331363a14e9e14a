"""The `conftest` module Keras' test files import (`from conftest import skip_if_backend`).

Keras keeps it at its repository's root, outside the sdist; this holds the names its test
files use, with the markers they carry.
"""

import pytest

__all__ = ["skip_if_backend"]


def skip_if_backend(given_backend, reason):
    """A marker that skips the test on Keras backend `given_backend`."""
    from keras.src.backend import backend

    return pytest.mark.skipif(backend() == given_backend, reason=reason)
