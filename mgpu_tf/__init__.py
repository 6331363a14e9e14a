"""mgpu_tf: multi-device training for TensorFlow and Keras 3, switched on with one flag.

Public names and the capability folders (`mgpu_tf.callbacks`, `mgpu_tf.cluster`, ...)
load on first use, listed in each package's `__init__.pyi` stub.

Design: docs/design.md#loading-on-first-use
"""

import enum
import importlib.util

import lazy_loader as lazy

__version__ = "0.1.0"


class Choice(str, enum.Enum):
    """A mode with a fixed set of values (the base of every such enum in the toolkit).

    It prints as its value, compares equal to it and serialises to JSON as a string.
    """

    def __str__(self):
        return self.value

    @classmethod
    def parse(cls, value, argument):
        """Returns `value` (a member or its name, any case) as a member; `ValueError` if none."""
        try:
            return cls(value.lower() if isinstance(value, str) else value)
        except ValueError:
            allowed = ", ".join(member.value for member in cls)
            raise ValueError(f"`{argument}` must be one of {allowed}. "
                             f"Received: {argument}={value!r}") from None


__getattr__, _lazy_dir, __all__ = lazy.attach_stub(__name__, __file__)
# Its modules are attributes too, but out of `__all__`: `import *` would load every one.
__all__ = [name for name in __all__ if importlib.util.find_spec(f"{__name__}.{name}") is None]


def __dir__():
    # `Choice`, `__version__` and the like are defined here, not loaded through the stub.
    return sorted({*globals(), *_lazy_dir()})


# A TensorFlow or Keras below the supported floor, forced past pip, says so in one line.
importlib.import_module(f"{__name__}.compat.releases").check_floor()
