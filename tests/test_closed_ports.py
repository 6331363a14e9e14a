"""Closed ports: only the job's workers get into its tcp ring, during a real 2-worker run."""

import threading
import time

import numpy as np
import pytest

from benchmarks import failure_worker
from support import ring_fuzz
from support import workers

SCRIPT = "support.mw_ring_fuzz"
SECRET = "0123456789abcdef-this-job-only"


@pytest.mark.multiworker
def test_strangers_on_the_ring_port_are_refused_and_training_is_undisturbed(tmp_path):
    env = {"MGPU_TF_JOB_SECRET": SECRET}
    code, outputs = workers.run_workers("-m", 2, SCRIPT, tmp_path / "clean", 0, env=env)
    assert code == 0, outputs
    out = tmp_path / "fuzzed"
    result = {}
    run = threading.Thread(target=lambda: result.update(done=workers.run_workers(
        "-m", 2, SCRIPT, out, 4, env=env)))
    run.start()
    deadline = time.monotonic() + 120
    while not (out / "port").exists():
        assert time.monotonic() < deadline and run.is_alive(), result
        time.sleep(0.05)
    # The attackers claim to be worker 1, the listener's left neighbour: only the
    # secret tells them apart. They go on while the job trains, on a closed port then.
    fuzzer = ring_fuzz.Fuzzer(("127.0.0.1", int((out / "port").read_text())), rank=1, size=2,
                              secret=SECRET.encode(), threads=8)
    run.join(timeout=300)
    outcomes = fuzzer.stop()
    code, outputs = result["done"]
    assert code == 0, outputs
    tried = sum(outcomes.values())
    print(f"{tried} connections tried: {outcomes}; by kind {dict(fuzzer.by_kind)}")
    assert "let in" not in outcomes, outcomes
    refused = int((out / "refused").read_text())
    assert 0 < refused <= outcomes.get("refused", 0), (refused, outcomes)
    assert set(fuzzer.by_kind) == set(ring_fuzz.KINDS), fuzzer.by_kind
    assert outputs[0].count("ring: refused a connection from") == refused
    clean = failure_worker.weights(tmp_path / "clean" / "final.npz")
    fuzzed = failure_worker.weights(out / "final.npz")
    # The same two workers and the same ring: the same sums in the same order, bit for bit.
    for a, b in zip(clean, fuzzed):
        np.testing.assert_array_equal(b, a)
