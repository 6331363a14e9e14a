"""mgpu_tf: multi-device training for TensorFlow and Keras 3, switched on with one flag.

Public names and the capability folders (`mgpu_tf.callbacks`, `mgpu_tf.cluster`, ...)
load on first use, listed in each package's `__init__.pyi` stub.

Design: docs/design.md#loading-on-first-use
"""

import importlib.util

import lazy_loader as lazy

from mgpu_tf.base.choice import Choice  # noqa: F401 - the base of the toolkit's enums
from mgpu_tf.base.version import __version__  # noqa: F401

__getattr__, _lazy_dir, __all__ = lazy.attach_stub(__name__, __file__)
# Its modules are attributes too, but out of `__all__`: `import *` would load every one.
__all__ = [name for name in __all__ if importlib.util.find_spec(f"{__name__}.{name}") is None]


def __dir__():
    # `Choice`, `__version__` and the like are imported here, not loaded through the stub.
    return sorted({*globals(), *_lazy_dir()})


# A TensorFlow or Keras below the supported floor, forced past pip, says so in one line.
importlib.import_module(f"{__name__}.compat.releases").check_floor()
