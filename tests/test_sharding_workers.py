"""shard_dataset on 2 and 3 real local workers: one launch each, several checks per launch.

Each worker runs tests/support/sharding_worker.py under make_strategy("multi_worker") with
TensorFlow's autoshard log on: TensorFlow 2.21 logs "AUTO sharding policy will apply
DATA sharding policy ..." at VLOG(2), where older releases printed a WARNING. Shares are worked
out by hand; trained weights are compared with plain Keras under the default
strategy on the same global batches.
"""

import json
import re

import numpy as np
import pytest

from support import sharding_problem
from support import compare
from support import tolerance
from support import workers

ID_FILES = [300, 250, 247, 200]
FIT_FILES = {2: [60, 40], 3: [40, 33, 27]}
AUTOSHARD_WARNING = "AUTO sharding policy will apply DATA sharding policy"
_VERBOSE_AUTOSHARD = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "auto_shard=2"}

# Hand-computed: "data" gives the 997th example (first of its block) to worker 0.
DATA_EXAMPLES = {2: [499, 498], 3: [333, 332, 332]}
# Largest file first to the worker with the fewest steps' worth: 2 workers of 6 per
# step: 300 -> w0, 250 -> w1, 247 -> w1 (497 < 547), 200 -> w0 (500 < 697);
# 3 workers of 4: 300, 250, 247 one each, then 200 -> w2 (447 < 450 < 500).
FILE_EXAMPLES = {2: [500, 497], 3: [300, 250, 447]}
FILE_STEPS = {2: 84, 3: 112}  # ceil(500 / 6), ceil(447 / 4)
TOLERANCE = tolerance.training(max(FILE_STEPS.values()), sharding_problem.TERMS + 12)


def _results(output):
    results = {}
    for line in output.splitlines():
        match = re.match(r"(ERROR_\w+|SEEN_\w+|WEIGHTS_\w+|DONE) (.+)$", line)
        if match:
            results[match.group(1)] = json.loads(match.group(2))
    return results


def _file_steps(sizes, per_worker):
    """Global batches when each worker reads one file of `sizes` in order."""
    starts = np.cumsum([0] + sizes[:-1])
    steps = max(-(-size // per_worker) for size in sizes)
    return [[i for start, size in zip(starts, sizes)
             for i in range(start + s * per_worker, min(start + (s + 1) * per_worker,
                                                        start + size))]
            for s in range(steps)]


# Worker counts, and the transport of the gradients and logs: the tcp ring must pair
# its messages when workers' last batches differ (three workers' files of 40, 33 and 27
# examples). The shares do not depend on the transport: two workers run over
# TensorFlow's collectives, three over the ring.
@pytest.fixture(params=[(2, "tensorflow"), (3, "tcp")],
                ids=lambda p: f"{p[0]}-{p[1]}", scope="module")
def launch(request, tmp_path_factory):
    count, transport = request.param
    directory = tmp_path_factory.mktemp(f"sharding{count}{transport}")
    x, y, _ = sharding_problem.problem(997, seed=2)
    sharding_problem.write_records(directory, x, y, ID_FILES, prefix="ids")
    sharding_problem.write_records(directory, x, y, [10], prefix="one")
    x, y, _ = sharding_problem.problem(100, seed=1)
    sharding_problem.write_records(directory, x, y, FIT_FILES[count], prefix="fit")
    code, outputs = workers.run_workers(
        "-m", count, "support.sharding_worker", directory,
        env=dict(_VERBOSE_AUTOSHARD, MGPU_TF_TEST_TRANSPORT=transport))
    assert code == 0, f"A worker failed (exit {code}):\n{outputs.get(0, '')[-5000:]}"
    return count, outputs, {i: _results(out) for i, out in outputs.items()}


@pytest.mark.multiworker
def test_bad_policies_fail_on_every_worker(launch):
    count, _, results = launch
    for result in results.values():
        assert result["ERROR_off"].startswith(
            f"`policy='off'` would give each of the {count} workers the whole data set")
        assert result["ERROR_file"].startswith(
            f"`policy='file'` needs at least as many files as workers ({count}); the "
            "patterns match 1 file(s). Received: policy='file'. Use policy='data'")


@pytest.mark.multiworker
@pytest.mark.parametrize("policy", ["data", "file", "function"])
def test_every_example_once_over_the_workers(launch, policy):
    count, _, results = launch
    seen = [results[w][f"SEEN_{policy}"] for w in range(count)]
    assert sorted(i for steps in seen for batch in steps for i in batch) == list(range(997))
    # The function shards every n-th example itself, as "data" does.
    expected = FILE_EXAMPLES if policy == "file" else DATA_EXAMPLES
    assert [sum(map(len, steps)) for steps in seen] == expected[count]
    steps = FILE_STEPS[count] if policy == "file" else 84
    assert [len(s) for s in seen] == [steps] * count


@pytest.mark.multiworker
def test_fit_equals_single_device(launch):
    count, _, results = launch
    x, y, initial = sharding_problem.problem(100)
    # weights=[2, 1] on 2 workers: the same global batches.
    reference = sharding_problem.reference_weights(x, y, initial,
                                                   sharding_problem.blocks(100, 12))
    xf, yf, initial_f = sharding_problem.problem(100, seed=1)
    file_steps = _file_steps(FIT_FILES[count], 12 // count)
    reference_f = sharding_problem.reference_weights(xf, yf, initial_f, file_steps)
    for result in results.values():
        trained = sharding_problem.from_json(result["WEIGHTS_data"])
        assert compare.relative_difference(trained, reference) < TOLERANCE
        trained = sharding_problem.from_json(result["WEIGHTS_file"])
        assert compare.relative_difference(trained, reference_f) < TOLERANCE


@pytest.mark.multiworker
def test_no_autoshard_warning(launch):
    count, outputs, results = launch
    for index, output in outputs.items():
        # CONTROL is on standard error, as TensorFlow's log: the launcher keeps the order
        # within each stream, not between the two.
        lines = output.splitlines()
        ours = "\n".join(lines[:lines.index("CONTROL")])
        control = "\n".join(lines[lines.index("CONTROL") + 1:])
        assert results[index]["DONE"] == count
        assert AUTOSHARD_WARNING not in ours
        assert AUTOSHARD_WARNING in control  # TensorFlow's own pipeline does warn here
