"""The Keras tests that cannot pass under a mirrored strategy, each with the reason: declared.

As the combination matrix declares what a combination gives (mgpu_tf/comm/combinations.py),
each `Difference` names tests (node ids from the test tree's root; a trailing `*` takes every
test whose id starts so) and what they give under `make_strategy("mirrored")` on 2 devices.
A test that passes with Keras alone and fails under the strategy, undeclared, fails the run.
"""

import dataclasses
import enum

__all__ = ["DIFFERENCES", "Difference", "Kind", "builds_its_own_strategy", "declared"]


class Kind(str, enum.Enum):
    """What a declared test gives under the strategy."""

    FAILS = "fails under the strategy"
    OWN_STRATEGY = "builds its own strategy: runs with the patches, no default strategy"

    def __str__(self):
        return self.value


@dataclasses.dataclass(frozen=True)
class Difference:
    """Tests (`tests`: node ids, or prefixes ending in `*`) and what they give, and why."""

    tests: tuple
    kind: Kind
    reason: str

    def covers(self, nodeid):
        return any(nodeid.startswith(t[:-1]) if t.endswith("*") else nodeid == t
                   for t in self.tests)


_OWN = ("builds and enters a tf.distribute strategy of its own, which TensorFlow refuses "
        "inside another strategy set as the default (\"Mixing different tf.distribute.Strategy "
        "objects\"); it runs with every patch that make_strategy installed, as a strategy a "
        "user builds would")

DIFFERENCES = (
    Difference(("keras/src/backend/tensorflow/distribute_test.py::DistributeTest::*",
                "keras/src/backend/tensorflow/optimizer_distribute_test.py::"
                "OptimizerDistributeTest::*",
                "keras/src/callbacks/swap_ema_weights_test.py::SwapEMAWeightsTest::"
                "test_swap_ema_weights_with_tf_distribute",
                "keras/src/trainers/data_adapters/tf_dataset_adapter_test.py::"
                "TestTFDatasetAdapter::test_distributed_datasets_from_function_*"),
               Kind.OWN_STRATEGY, _OWN),
)


def declared(nodeid):
    """The `Difference` that covers `nodeid`, or None."""
    return next((d for d in DIFFERENCES if d.covers(nodeid)), None)


def builds_its_own_strategy(nodeid):
    """True when `nodeid` is declared `Kind.OWN_STRATEGY`."""
    found = declared(nodeid)
    return found is not None and found.kind == Kind.OWN_STRATEGY
