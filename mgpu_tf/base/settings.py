"""`Settings`: the options one strategy was made with, parsed once and frozen.

Design: docs/design.md#the-options-walk
"""

import collections.abc
import dataclasses
import types

from mgpu_tf.base import registry

__all__ = ["Settings"]


@dataclasses.dataclass(frozen=True, eq=False, init=False)
class Settings(collections.abc.Mapping):
    """The parsed options of one strategy: a read-only mapping with attribute access.

    The mapping holds the options given, as the validated options dictionary did; an
    attribute is the option's value, or its declared default when it was not given.
    """

    kind: str  # the registered name of the strategy they are for
    given: types.MappingProxyType

    def __init__(self, kind, values):
        self.__dict__.update(kind=kind, given=types.MappingProxyType(dict(values)))

    def __getitem__(self, name):
        return self.given[name]

    def __iter__(self):
        return iter(self.given)

    def __len__(self):
        return len(self.given)

    def __getattr__(self, name):  # only for names that are not fields
        if name.startswith("__") or name in ("kind", "given"):
            raise AttributeError(name)
        if name in self.given:
            return self.given[name]
        try:
            return registry.option(name).default
        except KeyError:
            raise AttributeError(f"No option {name!r} in the table. Received: {name}") from None

    def __reduce__(self):  # a mappingproxy does not pickle
        return Settings, (self.kind, dict(self.given))

    def __repr__(self):
        return f"Settings({self.kind!r}, {dict(self.given)!r})"
