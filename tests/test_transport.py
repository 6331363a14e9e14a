"""The transport option's checks; training over the ring is tested against
hand-computed updates in test_compression.py and test_accumulation.py."""

import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.comm import transport


@pytest.mark.parametrize("value, expected", [("tcp", "tcp"), ("TCP", "tcp"),
                                             ("tensorflow", "tensorflow")])
def test_the_transports_are_named(value, expected):
    assert transport.check_transport(value) == expected


@pytest.mark.parametrize("value", ["udp", "", 1])
def test_an_unknown_transport_names_the_choices(value):
    with pytest.raises(ValueError, match="`transport` must be one of tensorflow, tcp, auto. Received"):
        mgpu_tf.make_strategy("multi_worker", transport=value)


@pytest.mark.parametrize("kind", ["mirrored", "default", "one_device"])
def test_transport_applies_only_between_workers(kind):
    with pytest.raises(ValueError, match="`transport` does not apply to strategy"):
        mgpu_tf.make_strategy(kind, transport="tcp")


def test_the_ring_refuses_a_strategy_without_workers():
    with pytest.raises(ValueError, match="transport='tcp' applies to strategy 'multi_worker'. "
                                         "Received: a MirroredStrategy"):
        transport.connect(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
