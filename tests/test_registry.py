"""The registry's contracts: unknown names, taken names, and precision's global effect."""

import logging
import subprocess
import sys

import keras
import pytest

import mgpu_tf
from mgpu_tf.base import registry
from mgpu_tf.strategies import factory


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
    with pytest.raises(ValueError, match="Unknown strategy 'mirored'. Did you mean 'mirrored'"
                                         r"\? Known strategies: auto, "):
        mgpu_tf.make_strategy("mirored")


def test_a_misspelt_name_fails_before_tensorflow_is_imported():
    # TensorFlow takes seconds to import; a wrong name is known without it.
    code = ("import sys, mgpu_tf\n"
            "try:\n    mgpu_tf.make_strategy('mirorred')\n"
            "except ValueError as error:\n    print(error)\n"
            "print('tensorflow' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.splitlines() == [
        "Unknown strategy 'mirorred'. Did you mean 'mirrored'? Known strategies: auto, default, "
        "hybrid, mirrored, model_parallel, multi_worker, one_device, tpu; aliases: "
        "multi_worker_mirrored (multi_worker), none (default), off (default).", "False"], (
        result.stderr[-2000:])


def test_the_names_known_before_tensorflow_are_those_registered():
    # The built-in names the factory knows before loading are the ones its modules register.
    mgpu_tf.available_strategies()
    assert set(factory._BUILT_IN) == set(registry.entries())
    assert factory._BUILT_IN_ALIASES == registry._ALIASES


def test_a_misspelt_option_name_gets_the_closest_one():
    with pytest.raises(TypeError, match=r"make_strategy\(\) got unknown option\(s\) "
                                        r"\['all_reduse'\]. 'all_reduse': did you mean "
                                        r"'all_reduce'\? Options: devices, "):
        mgpu_tf.make_strategy("mirrored", all_reduse="ring")


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
