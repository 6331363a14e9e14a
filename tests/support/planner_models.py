"""Model functions for `mgpu-tf plan --model support.planner_models:NAME` in test_planner.py."""

from support import models

NOT_CALLABLE = 3


def lopsided():
    """16 KiB, 4 MiB, 1 MiB and 516 B of float32 weights: stages cannot be even."""
    return models.mlp((512, 2048, 128, 1), inputs=7)


def failing():
    raise RuntimeError("no data")


def not_a_model():
    return 7
