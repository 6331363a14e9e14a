"""The table of options: one declaration gives the check, the flag, the error and the value."""

import pathlib
import pickle
import re

import pytest
from absl import flags

import mgpu_tf
from mgpu_tf import flags as mgpu_flags
from mgpu_tf.base import options as options_lib
from mgpu_tf.base import registry
from mgpu_tf.base.settings import Settings

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def toy_option(monkeypatch):
    """`gossip_rounds`, a toy option of mirrored and default, gone from the table after the test."""
    mgpu_tf.available_strategies()  # the built-in options and plugins are declared
    monkeypatch.setattr(registry, "_TABLE", dict(registry._TABLE))
    calls = []

    def check(value):
        calls.append(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"`gossip_rounds` must be an integer. Received: gossip_rounds={value!r}")
        if value < 1:
            raise ValueError("`gossip_rounds` must be at least 1. Received: "
                             f"gossip_rounds={value}. Use 1 for one round.")
        return value

    registry.register_option("gossip_rounds", "rounds of gossip per step (toy)", check,
                             type=int, minimum=1, default=3, strategies=("mirrored", "default"),
                             flag="integer")
    return calls


def _gossip_rounds(strategy):
    """The toy option's consumer: it reads the value from the strategy's settings."""
    return mgpu_tf.kind_of(strategy).settings.gossip_rounds


def test_one_declaration_gives_the_value_and_its_default(toy_option):
    assert _gossip_rounds(mgpu_tf.make_strategy("mirrored", devices=2, gossip_rounds=5)) == 5
    assert _gossip_rounds(mgpu_tf.make_strategy("mirrored", devices=2)) == 3


@pytest.mark.parametrize("kind, value, error, match", [
    ("mirrored", 0, ValueError,
     "`gossip_rounds` must be at least 1. Received: gossip_rounds=0. Use 1 for one round."),
    ("mirrored", "5", TypeError, "`gossip_rounds` must be an integer. Received: gossip_rounds='5'"),
    ("one_device", 2, ValueError, "`gossip_rounds` does not apply to strategy 'one_device'; it "
     "applies to default, mirrored. Received: gossip_rounds=2"),
])
def test_one_declaration_gives_the_check_and_its_message(toy_option, kind, value, error, match):
    with pytest.raises(error, match=f"^{re.escape(match)}$"):
        mgpu_tf.make_strategy(kind, gossip_rounds=value)


def test_one_declaration_gives_a_flag(toy_option):
    values = flags.FlagValues()
    mgpu_flags.define_flags(values)
    assert values["gossip_rounds"].help == "rounds of gossip per step (toy)"
    values(["prog", "--strategy=mirrored", "--devices=2", "--gossip_rounds=4"])
    assert mgpu_flags.strategy_options(values) == ("mirrored", {"devices": 2, "gossip_rounds": 4})
    assert _gossip_rounds(mgpu_flags.make_strategy_from_flags(values)) == 4
    bad = flags.FlagValues()
    mgpu_flags.define_flags(bad)
    with pytest.raises(flags.IllegalFlagValueError,
                       match="flag --gossip_rounds=0: `gossip_rounds` must be at least 1"):
        bad(["prog", "--strategy=mirrored", "--gossip_rounds=0"])


def test_auto_checks_an_option_once(toy_option):
    strategy = mgpu_tf.make_strategy("auto", gossip_rounds=2)  # this CPU-only machine: default
    assert (mgpu_tf.strategy_kind(strategy), _gossip_rounds(strategy)) == ("default", 2)
    assert toy_option == [2]


def test_without_a_check_the_declared_type_range_and_choices_check(monkeypatch):
    mgpu_tf.available_strategies()
    monkeypatch.setattr(registry, "_TABLE", dict(registry._TABLE))
    registry.register_option("rumour", "what the gossip is about (toy)", type=str,
                             choices=("weights", "gradients"), strategies=("default",))
    registry.register_option("gossip_rounds", "rounds (toy)", type=int, minimum=1,
                             strategies=("default",))
    assert mgpu_tf.make_strategy("default", rumour="weights") is not None
    for options, error, match in [
            ({"rumour": "losses"}, ValueError,
             "`rumour` must be one of weights, gradients. Received: rumour='losses'"),
            ({"rumour": 3}, TypeError, "`rumour` must be of type str. Received: rumour=3"),
            ({"gossip_rounds": 0}, ValueError,
             "`gossip_rounds` must be at least 1. Received: gossip_rounds=0"),
            ({"gossip_rounds": True}, TypeError,
             "`gossip_rounds` must be an integer. Received: gossip_rounds=True")]:
        with pytest.raises(error, match=f"^{re.escape(match)}$"):
            mgpu_tf.make_strategy("default", **options)


def test_the_toy_option_left_the_table():
    assert "gossip_rounds" not in registry.OPTIONS and "rumour" not in registry.OPTIONS


def test_settings_are_a_frozen_mapping_with_typed_attributes():
    mgpu_tf.available_strategies()
    settings = Settings("mirrored", {"steps_per_sync": 4, "devices": ["/device:CPU:0"]})
    assert dict(settings) == {"steps_per_sync": 4, "devices": ["/device:CPU:0"]}
    assert (settings.get("all_reduce", "auto"), "num_gpus" in settings, len(settings)) == (
        "auto", False, 2)
    assert (settings.steps_per_sync, settings.num_packs, settings.transport) == (4, 1, "auto")
    assert settings.compression == "none" and settings.timeout_seconds is None
    with pytest.raises(AttributeError, match="cannot assign to field 'steps_per_sync'"):
        settings.steps_per_sync = 2
    with pytest.raises(TypeError):
        settings["steps_per_sync"] = 2
    with pytest.raises(TypeError):
        settings.given["steps_per_sync"] = 2
    assert pickle.loads(pickle.dumps(settings)).steps_per_sync == 4
    with pytest.raises(AttributeError, match="No option 'speed'"):
        settings.speed  # noqa: B018


def test_make_strategy_keeps_the_settings_on_the_strategy():
    strategy = mgpu_tf.make_strategy("mirrored", devices=2, compression="FLOAT16", num_packs=None)
    settings = mgpu_tf.kind_of(strategy).settings
    assert (settings.kind, dict(settings)) == (
        "mirrored", {"devices": ["/device:CPU:0", "/device:CPU:1"], "compression": "float16"})


def _rendered(option):
    """A row of the docs' option table, written from the declaration."""
    def code(value):
        return "-" if value is None else f"`{value}`"

    types = option.type if isinstance(option.type, tuple) else (option.type,)
    kind = " or ".join(t.__name__ for t in types) if option.type else "any"
    allowed = (", ".join(f"`{c}`" for c in option.choices) if option.choices else
               f"{option.minimum} to {option.maximum}" if option.maximum is not None else
               f">= {option.minimum}" if option.minimum is not None else "-")
    flag = f"`--{option.name}`" if option.flag else "-"
    strategies = ", ".join(sorted(n for n, e in registry.entries().items()
                                  if option.name in e.options and n != "auto")) or "auto"
    return (f"| `{option.name}` | {kind} | {allowed} | {code(option.default)} | {strategies} | "
            f"{flag} | {option.help} |")


def test_the_api_page_lists_the_table_as_declared():
    mgpu_tf.available_strategies()
    page = (ROOT / "docs" / "api" / "strategies.md").read_text()
    rows = [line for line in page.split("## Options", 1)[1].splitlines()
            if line.startswith("| `")]
    assert rows == [_rendered(option) for option in registry.options()]


def test_the_readme_names_each_strategys_options():
    mgpu_tf.available_strategies()
    text = (ROOT / "README.md").read_text().split("## Strategies", 1)[1].split("\n## ", 1)[0]
    for line in text.splitlines():
        match = re.match(r"^\| `(\w+)`[^|]* \| [^|]+ \| (.+) \|$", line)
        if match and match.group(1) != "auto":
            named = set(re.findall(r"`(\w+)`", match.group(2))) & set(registry.OPTIONS)
            assert named == set(registry.entry(match.group(1)).options), match.group(1)


def test_the_cli_page_names_every_flag_of_the_table():
    mgpu_tf.available_strategies()
    page = (ROOT / "docs" / "cli.md").read_text()
    missing = [o.name for o in registry.options() if o.flag and f"`--{o.name}`" not in page]
    assert not missing, missing


def test_hybrid_takes_the_all_reduce_algorithms_across_workers():
    # hybrid used to be checked with one machine's algorithms, then again as multi_worker.
    mgpu_tf.available_strategies()
    assert options_lib.parse_options("hybrid", {"all_reduce": "RING"}).all_reduce == "ring"
    with pytest.raises(ValueError, match=re.escape(
            "`all_reduce` for hybrid must be one of auto, ring, nccl ('hierarchical_copy' and "
            "'reduce_to_one' are for one machine). Received: all_reduce='hierarchical_copy'")):
        options_lib.parse_options("hybrid", {"all_reduce": "hierarchical_copy"})
