"""The last line of the main job (`python -m mgpu_tf.train`), read back.

    done: strategy=NAME replicas=N examples_per_sec=X steps_examples_per_sec=S fit_seconds=F
          test_loss=Y test_accuracy=Z  (one line)
"""

import re

__all__ = ["DONE", "parse_done", "assert_trained_alike"]

_NUMBER = r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|nan|inf"
DONE = re.compile(rf"^done: strategy=(?P<strategy>\w+) replicas=(?P<replicas>\d+) "
                  rf"examples_per_sec=(?P<examples_per_sec>-?(?:{_NUMBER})) "
                  rf"steps_examples_per_sec=(?P<steps_examples_per_sec>-?(?:{_NUMBER})) "
                  rf"fit_seconds=(?P<fit_seconds>-?(?:{_NUMBER})) "
                  rf"test_loss=(?P<test_loss>-?(?:{_NUMBER})) "
                  rf"test_accuracy=(?P<test_accuracy>-?(?:{_NUMBER}))$",
                  re.MULTILINE)
_TYPES = {"strategy": str, "replicas": int, "examples_per_sec": float,
          "steps_examples_per_sec": float, "fit_seconds": float, "test_loss": float,
          "test_accuracy": float}


def parse_done(output):
    """Returns the `done:` line of `output` as a dict of typed values.

    The line must be there exactly once. Numbers keep their sign, `nan` and `inf`,
    so that a check on them can fail.

    Raises:
        AssertionError: naming what is wrong, with the end of `output`.
    """
    done = [line for line in output.splitlines() if line.startswith("done:")]
    assert len(done) == 1, f"{len(done)} done lines in:\n{output[-3000:]}"
    match = DONE.match(done[0])
    assert match, f"malformed done line: {done[0]!r}"
    return {name: _TYPES[name](value) for name, value in match.groupdict().items()}


def assert_trained_alike(results, who, *, strategy="multi_worker", replicas=2):
    """Checks that each process of one job succeeded and that all agree on loss and accuracy.

    Args:
        results: `(exit code, output text)` of each process.
        who: what the processes are, for the message ("pods", "tasks").
    """
    finals = []
    for code, output in results:
        assert code == 0, output[-3000:]
        done = parse_done(output)
        assert (done["strategy"], done["replicas"]) == (strategy, replicas), done
        finals.append((done["test_loss"], done["test_accuracy"]))
    assert len(set(finals)) == 1, f"the {who} disagree on the final loss and accuracy: {finals}"
