"""`mgpu_tf.callbacks.is_chief` answers for every strategy `make_strategy` returns."""

import types

import pytest

import mgpu_tf
import mgpu_tf.callbacks
from mgpu_tf.model_parallel.hybrid import strategy as hybrid_strategy


@pytest.mark.parametrize("kind, options", [
    ("default", {}),
    ("one_device", {}),
    ("mirrored", {"devices": 2}),
    ("model_parallel", {"devices": 2}),
])
def test_one_process_is_the_chief(kind, options):
    assert mgpu_tf.callbacks.is_chief(mgpu_tf.make_strategy(kind, **options)) is True


@pytest.mark.parametrize("chief", [True, False])
def test_hybrid_asks_its_communicator(chief):
    communicator = types.SimpleNamespace(
        extended=types.SimpleNamespace(should_checkpoint=chief))
    strategy = hybrid_strategy.HybridStrategy(["CPU:0", "CPU:1"], communicator, 2,
                                              0 if chief else 1)
    assert mgpu_tf.callbacks.is_chief(strategy) is chief
