"""Worker script: validation with `steps_per_execution`, and a step that leaves a worker
without examples, under make_strategy("multi_worker").

Run by tests/test_validation_steps.py as two real workers. Prints one
`result <case>: <json>` line per case of `validation_problem.CASES` it runs (or
`error <case>: <exception>`), for the test to compare with the one-device reference.
"""

import logging
import sys

import mgpu_tf
from support import validation_problem

# The case, and the steps per execution it runs with: the training epoch of 8 steps
# streams, the validation of 5 does not.
RUNS = (("validation", 4), ("one example, 2 replicas", 1))


def main():
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    strategy = mgpu_tf.make_strategy("multi_worker")
    for name, steps_per_execution in RUNS:
        try:
            results, _ = validation_problem.sharded(validation_problem.CASES[name], strategy,
                                                    steps_per_execution)
        except Exception as error:  # reported, so that the next case still runs
            message = (str(error).splitlines() or [""])[0][:300]
            print(f"error {name}: {type(error).__name__}: {message}")
            continue
        print(f"result {name}: {validation_problem.to_json(results)}")
    print("done")


if __name__ == "__main__":
    sys.exit(main())
