"""`Settings`: the options one strategy was made with, parsed once and frozen.

Design: docs/design.md#the-options-walk
"""

import collections.abc

from mgpu_tf.base import registry

__all__ = ["Settings"]


class Settings(collections.abc.Mapping):
    """The parsed options of one strategy: a read-only mapping with attribute access.

    The mapping holds the options given, as the validated options dictionary did; an
    attribute is the option's value, or its declared default when it was not given.
    """

    __slots__ = ("_kind", "_values")

    def __init__(self, kind, values):
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_values", dict(values))

    @property
    def kind(self):  # the registered name of the strategy they are for
        return self._kind

    def __getitem__(self, name):
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    def __getattr__(self, name):
        if name.startswith("_"):  # a slot not set yet (copy, pickle)
            raise AttributeError(name)
        if name in self._values:
            return self._values[name]
        try:
            return registry.option(name).default
        except KeyError:
            raise AttributeError(f"No option {name!r} in the table. Received: {name}") from None

    def __setattr__(self, name, value):
        raise AttributeError(f"Settings are frozen. Received: {name}={value!r}")

    def __repr__(self):
        return f"Settings({self._kind!r}, {self._values!r})"
