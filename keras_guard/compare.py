"""The checks between the runs' outcomes, and their counts.

Outcomes are `{node id: [outcome, message, seconds]}` as `plugin` writes them, each outcome
`"pass"`, `"fail"` or `"skip"`.
"""

import collections
import dataclasses

from keras_guard import differences

__all__ = ["Report", "compare", "counts"]


def counts(outcomes):
    """`{"pass": n, "fail": n, "skip": n}` of a run."""
    found = collections.Counter(result[0] for result in outcomes.values())
    return {name: found.get(name, 0) for name in ("pass", "fail", "skip")}


@dataclasses.dataclass
class Report:
    """What the runs gave: each a list of `(node id, what)`, empty when the check holds."""

    # Tests whose outcome with the patches differs from Keras alone's.
    changed_by_patches: list
    # Tests that pass with Keras alone and not under the strategy, undeclared.
    undeclared: list
    # Tests declared `Kind.FAILS` that failed under the strategy, with the declared reason.
    declared: list
    # Tests declared `Kind.FAILS` that passed: a declaration to look at again.
    declared_but_passed: list
    # Tests that the runs did not all run (one run stopped early, or collected others).
    missing: list
    # Tests declared `Kind.OWN_STRATEGY`: run under their own strategy, with the patches.
    own_strategy: list = dataclasses.field(default_factory=list)

    @property
    def holds(self):
        return not (self.changed_by_patches or self.undeclared or self.missing)


def compare(alone, patched, mirrored, declared=differences.declared):
    """The `Report` of three runs' outcomes; `declared(node id)` gives a test's `Difference`."""
    changed, undeclared, failed, passed, missing, own = [], [], [], [], [], []
    every = sorted(set(alone) | set(patched) | set(mirrored))
    for node in every:
        if node not in alone or node not in patched or node not in mirrored:
            runs = [name for name, run in (("alone", alone), ("patched", patched),
                                           ("mirrored", mirrored)) if node in run]
            missing.append((node, f"only in {', '.join(runs)}"))
            continue
        one, fixed, strategy = alone[node][0], patched[node][0], mirrored[node][0]
        if fixed != one:
            changed.append((node, f"{one} alone, {fixed} patched: {patched[node][1]}"))
        difference = declared(node)
        fails = difference is not None and difference.kind == differences.Kind.FAILS
        if difference is not None and difference.kind == differences.Kind.OWN_STRATEGY:
            own.append((node, strategy))
        if fails and strategy == "fail":
            failed.append((node, difference.reason))
        elif fails and strategy == "pass":
            passed.append((node, difference.reason))
        elif one == "pass" and strategy != "pass":
            undeclared.append((node, f"{strategy} under mirrored: {mirrored[node][1]}"))
    return Report(changed, undeclared, failed, passed, missing, own)
