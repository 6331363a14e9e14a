"""The registry's contracts: unknown names, taken names, and precision's global effect."""

import logging

import keras
import pytest

import mgpu_tf
from mgpu_tf.base import registry


@pytest.fixture
def fresh_registry(monkeypatch):
    """The registry as it is now, restored after the test."""
    mgpu_tf.available_strategies()  # the built-in strategies and plugins are registered
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_ALIASES", dict(registry._ALIASES))
    return registry


def _build(options):
    return "built"


def test_an_unknown_name_is_a_value_error_listing_the_known_ones():
    with pytest.raises(ValueError, match="Unknown strategy 'mirored'. Known strategies: auto, "):
        mgpu_tf.make_strategy("mirored")


@pytest.mark.parametrize("name, aliases", [("mirrored", ()), ("mine", ("off",))])
def test_a_taken_name_or_alias_is_refused(fresh_registry, name, aliases):
    taken = name if name == "mirrored" else "off"
    with pytest.raises(ValueError, match=f"Strategy name '{taken}' is already registered"):
        fresh_registry.register_strategy(name, "mine", _build, aliases=aliases)
    assert fresh_registry.entry("mirrored").build is not _build


def test_override_replaces_a_taken_name(fresh_registry):
    fresh_registry.register_strategy("mirrored", "mine", _build, override=True)
    assert mgpu_tf.available_strategies()["mirrored"] == "mine"
    assert fresh_registry.entry(fresh_registry.resolve_kind("mirrored")).build is _build


def test_a_new_name_needs_registered_options(fresh_registry):
    with pytest.raises(ValueError, match=r"Unknown options \['speed'\] for strategy 'mine'"):
        fresh_registry.register_strategy("mine", "mine", _build, options=("speed",))
    fresh_registry.register_strategy("mine", "mine", _build, options=("devices",))
    assert fresh_registry.resolve_kind("MINE") == "mine"


def test_precision_sets_the_process_wide_policy_and_says_so(caplog):
    before = keras.mixed_precision.dtype_policy().name
    try:
        with caplog.at_level(logging.INFO, logger="mgpu_tf"):
            mgpu_tf.make_strategy("default", precision="mixed_bfloat16")
        # Global: a model built later, outside any strategy's scope, follows it.
        layer = keras.layers.Dense(2)
        assert layer.compute_dtype == "bfloat16"
        assert any("set Keras' global dtype policy" in r.getMessage() for r in caplog.records)
    finally:
        keras.mixed_precision.set_dtype_policy(before)
