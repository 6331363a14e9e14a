"""mgpu_tf: multi-device training for TensorFlow and Keras 3, switched on with one flag.

Public names and the capability folders (`mgpu_tf.callbacks`, `mgpu_tf.cluster`, ...)
load on first use, listed in each package's `__init__.pyi` stub.

Design: docs/design.md#loading-on-first-use
"""

# Bound under private names: `dir(mgpu_tf)` lists the toolkit, not the modules it uses.
import importlib as _importlib
import importlib.util as _importlib_util

import lazy_loader as _lazy

from mgpu_tf.base.choice import Choice  # noqa: F401 - the base of the toolkit's enums
from mgpu_tf.base.version import __version__  # noqa: F401

__getattr__, _lazy_dir, __all__ = _lazy.attach_stub(__name__, __file__)
# Its modules are attributes too, but out of `__all__`: `import *` would load every one.
__all__ = [name for name in __all__ if _importlib_util.find_spec(f"{__name__}.{name}") is None]


def __dir__():
    # `Choice`, `__version__` and the like are imported here, not loaded through the stub;
    # the private helpers above stay out.
    return sorted({*(name for name in globals() if not name.startswith("_") or
                     name.startswith("__")), *_lazy_dir()})


# A TensorFlow or Keras below the supported floor, forced past pip, says so in one line.
_importlib.import_module(f"{__name__}.compat.releases").check_floor()
