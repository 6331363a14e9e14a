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


# Keras' tests that build and enter a strategy of their own reset TensorFlow's context first
# (DistributeTest, OptimizerDistributeTest, SwapEMAWeightsTest): on Keras 3.15.1 they pass with
# the default strategy set, so none is declared OWN_STRATEGY.
DIFFERENCES = ()


def declared(nodeid):
    """The `Difference` that covers `nodeid`, or None."""
    return next((d for d in DIFFERENCES if d.covers(nodeid)), None)


def builds_its_own_strategy(nodeid):
    """True when `nodeid` is declared `Kind.OWN_STRATEGY`."""
    found = declared(nodeid)
    return found is not None and found.kind == Kind.OWN_STRATEGY
