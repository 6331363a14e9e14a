"""The planner: which parallelism a model wants, before any hardware is booked.

The names load on first use, so `mgpu-tf plan --help` answers without TensorFlow.

Design: docs/design.md#the-planner
"""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
