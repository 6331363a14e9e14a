"""Model functions for `mgpu-tf plan --model planner_models:NAME` in tests/test_planner.py."""

from model_parallel_models import mlp

NOT_CALLABLE = 3


def lopsided():
    """16 KiB, 4 MiB, 1 MiB and 516 B of float32 weights: stages cannot be even."""
    return mlp((512, 2048, 128, 1), inputs=7)


def failing():
    raise RuntimeError("no data")


def not_a_model():
    return 7
