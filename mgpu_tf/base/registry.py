"""The names of strategies and of their options, in one registry.

Design: docs/design.md#the-strategy-factory
"""

import collections.abc
import dataclasses
import difflib
import enum

from mgpu_tf.base.choice import Choice

__all__ = [
    "StrategyName",
    "Option",
    "OPTIONS",
    "register_strategy",
    "register_option",
    "available_strategies",
    "resolve_kind",
    "entry",
    "entries",
    "option",
    "options",
    "option_checks",
]


class StrategyName(Choice):
    """The built-in strategy names."""

    AUTO = "auto"
    DEFAULT = "default"
    ONE_DEVICE = "one_device"
    MIRRORED = "mirrored"
    MULTI_WORKER = "multi_worker"
    TPU = "tpu"


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of `make_strategy`, declared once: flags, checks and docs read it.

    `check` turns a given value into the parsed one (raising `TypeError`/`ValueError`);
    without one, `type`, `minimum`, `maximum` and `choices` check it. `settle`, a function of
    the options given returning them settled, runs first: options declared together check
    how they go together there (`worker_hosts` and `task_index` become a `cluster`). `flag` is the absl flag kind (`"string"`, `"integer"`,
    `"list"`, `"boolean"`), `None` for no flag.
    """

    name: str
    help: str
    type: object = None
    minimum: object = None
    maximum: object = None
    choices: tuple = ()
    default: object = None
    strategies: tuple = ()
    check: object = None
    flag: str = None
    flag_note: str = ""
    from_flag: object = None
    settle: object = None


class _Descriptions(collections.abc.Mapping):
    """`{option: its help}` for every option of the table, in the order declared."""

    def __getitem__(self, name):
        return _TABLE[name].help

    def __iter__(self):
        return iter(_TABLE)

    def __len__(self):
        return len(_TABLE)

    def __repr__(self):
        return repr(dict(self))


# The table: every option make_strategy knows, declared with register_option where the
# feature lives; mgpu_tf.strategies.options imports every declarer (this module imports
# no other part of the toolkit).
_TABLE = {}
OPTIONS = _Descriptions()


@dataclasses.dataclass(frozen=True)
class _Entry:
    name: str
    description: str
    build: object
    declared: frozenset
    strategy_types: tuple
    kind: object = None

    @property
    def options(self):
        """The options it accepts: those it registered with and those naming it."""
        return self.declared | {o.name for o in _TABLE.values() if self.name in o.strategies}


_REGISTRY = {}
_ALIASES = {}


def register_strategy(name, description, build, *, options=(), aliases=(),
                      strategy_types=(), kind=None, override=False):
    """Adds a strategy name to the registry.

    A name or alias that is taken is refused unless `override=True`, so a plugin
    cannot replace a strategy by accident.

    Args:
        name: the short lowercase name.
        description: one line saying what it is.
        build: a function of the strategy's settings (a read-only mapping of the
            parsed options, `mgpu_tf.base.settings.Settings`) returning the strategy.
        options: option names the strategy accepts.
        aliases: other names for it.
        strategy_types: classes of the objects it returns, for `kind_of`.
        kind: the `mgpu_tf.base.kind.StrategyKind` subclass that answers for it.
            Defaults to `None` (the base, which answers from TensorFlow's figures).
        override: replace a strategy already registered under `name` or an alias.
            Defaults to `False`.

    Raises:
        ValueError: for a taken name or alias without `override=True`, or an
            option that is not registered.
    """
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise ValueError(
            f"Unknown options {sorted(unknown)} for strategy {name!r}. Register them first "
            "with register_option(name, description).")
    if not override:
        for taken in (name, *aliases):
            if taken in _REGISTRY or taken in _ALIASES:
                raise ValueError(
                    f"Strategy name {taken!r} is already registered. Received: name={name!r}, "
                    f"aliases={tuple(aliases)!r}. Pick another name, or pass override=True "
                    "to replace it.")
    _REGISTRY[name] = _Entry(name, description, build, frozenset(options),
                             tuple(strategy_types), kind)
    for alias in aliases:
        _ALIASES[alias] = name


def register_option(name, description, check=None, **declaration):
    """Declares an option in the table; returns its `Option`.

    Args:
        name: the option's keyword.
        description: one line saying what it is (its `--help`).
        check: a function of the value that returns it parsed or raises `TypeError` or
            `ValueError`. A name declared again keeps its declaration but this check.
        **declaration: the other fields of `Option`, such as `strategies`.
    """
    if name in _TABLE:
        if check is not None:
            _TABLE[name] = dataclasses.replace(_TABLE[name], check=check)
        return _TABLE[name]
    declaration.setdefault("strategies", ())
    _TABLE[name] = Option(name, description, check=check,
                          **dict(declaration, strategies=tuple(declaration["strategies"])))
    return _TABLE[name]


def available_strategies():
    """Returns `{name: description}` for every registered strategy name.

    The built-in names come first, in `StrategyName`'s order, then the others in
    the order they were registered.
    """
    builtin = [kind.value for kind in StrategyName if kind.value in _REGISTRY]
    names = builtin + [name for name in _REGISTRY if name not in builtin]
    return {name: _REGISTRY[name].description for name in names}


def resolve_kind(kind):
    """Returns the registered name for `kind` (a name, alias or `StrategyName`).

    Raises:
        TypeError: when `kind` is not a string.
        ValueError: when the name is unknown; the message lists the known names.
    """
    if not isinstance(kind, str):
        raise TypeError(f"`kind` must be a strategy name. Received: kind={kind!r}")
    name = str(kind.value if isinstance(kind, enum.Enum) else kind).strip().lower()
    name = _ALIASES.get(name, name)
    if name not in _REGISTRY:
        raise unknown_strategy(kind, _REGISTRY, _ALIASES)
    return name


def unknown_strategy(kind, strategies, aliases):
    """The `ValueError` for a name that is none of `strategies` or `aliases` (`{alias: name}`).

    It suggests the closest name, and lists the known ones.
    """
    name = str(getattr(kind, "value", kind)).strip().lower()
    close = difflib.get_close_matches(name, [*strategies, *aliases], n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(f"{a} ({t})" for a, t in sorted(aliases.items()))
    return ValueError(f"Unknown strategy {kind!r}.{hint} Known strategies: "
                      f"{', '.join(sorted(strategies))}; aliases: {listed}.")


def entry(name):
    """The registry entry of a resolved strategy name."""
    return _REGISTRY[name]


def entries():
    """`{name: entry}` of every registered strategy (plugins loaded)."""
    return dict(_REGISTRY)


def option(name):
    """The `Option` declared under `name` (`KeyError` when there is none)."""
    return _TABLE[name]


def options():
    """Every `Option` of the table, in the order declared."""
    return list(_TABLE.values())


def option_checks():
    """`{option: check}` of the options declared with a check."""
    return {o.name: o.check for o in _TABLE.values() if o.check is not None}
