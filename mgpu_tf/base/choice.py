"""`Choice`: the base of the toolkit's modes with a fixed set of values."""

import enum

__all__ = ["Choice"]


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
