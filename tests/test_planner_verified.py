"""The planner against measurements: memory of a real step, and a real data-parallel step."""

import math
import re

import pytest

from support import workers


def _figures(text):
    return dict(re.findall(r"^([^:\n]+): (.*)$", text, re.M))


def test_memory_estimate_is_within_30_percent_of_a_training_steps_resident_growth():
    result = workers.run_python("-m", "support.planner_memory", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = _figures(result.stdout)
    assert 0.7 <= float(figures["ratio"]) <= 1.3, result.stdout


@pytest.mark.multiworker
def test_data_parallel_step_is_predicted_and_measured_on_two_workers():
    code, out = workers.run_workers("-m", 2, "support.planner_step_time")
    assert code == 0, out
    figures = _figures(out[0])
    assert figures["option"] == "data"
    # How near the prediction comes is a benchmark's figure (docs/benchmarks.md runs this
    # script under `mgpu-tf launch`); here, that each step is timed and the ratio is theirs.
    times = {name: float(figures[name]) for name in ("compute ms", "predicted ms", "measured ms")}
    assert all(math.isfinite(v) and v > 0 for v in times.values()), out[0]
    assert float(figures["ratio"]) == pytest.approx(
        times["measured ms"] / times["predicted ms"], rel=0.01, abs=2e-3), out[0]
