"""`mgpu-tf bench` and the ring all-reduce cost model it checks measurements against."""

import json
import re

import keras
import pytest

from mgpu_tf.planner import cost_model
from mgpu_tf.cli import main


@pytest.mark.parametrize("workers, expected", [(1, 0.0), (2, 1000.0), (4, 1500.0),
                                               (8, 1750.0)])
def test_ring_all_reduce_sends_2_n_minus_1_over_n_of_the_bytes(workers, expected):
    assert cost_model.ring_all_reduce_bytes(1000, workers) == pytest.approx(expected)


def test_ring_all_reduce_seconds_by_hand():
    # 4 workers, 8 MB: each sends 12 MB; at 1 GB/s that is 12 ms, plus 1 ms latency.
    seconds = cost_model.ring_all_reduce_seconds(8e6, 4, bandwidth=1e9, latency=1e-3)
    assert seconds == pytest.approx(0.013)
    assert cost_model.ring_all_reduce_seconds(8e6, 1, bandwidth=1e9, latency=1e-3) == 0.0


def test_predicted_step_adds_communication_shared_over_steps_per_sync():
    step = cost_model.predict_step_seconds(0.05, 8e6, 2, bandwidth=1e9, latency=2e-3,
                                           steps_per_sync=2)
    assert step == pytest.approx(0.05 + (0.008 + 0.002) / 2)


@pytest.mark.parametrize("call, error, match", [
    (lambda: cost_model.ring_all_reduce_seconds(1, 2, bandwidth=0), ValueError,
     "`bandwidth` must be positive. Received: bandwidth=0"),
    (lambda: cost_model.ring_all_reduce_seconds(1, 0, bandwidth=1), ValueError,
     "`workers` must be an integer of at least 1"),
    (lambda: cost_model.ring_all_reduce_seconds("1", 2, bandwidth=1), TypeError,
     "`gradient_bytes` must be a number"),
    (lambda: cost_model.predict_step_seconds(1, 1, 2, 1, steps_per_sync=0), ValueError,
     "`steps_per_sync` must be an integer of at least 1"),
])
def test_cost_model_rejects_bad_values(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_gradient_bytes_counts_trainable_weights_in_the_wire_dtype():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    assert cost_model.gradient_bytes(model) == (4 * 3 + 3) * 4
    assert cost_model.gradient_bytes(model, "bfloat16") == (4 * 3 + 3) * 2


def test_loopback_bandwidth_is_measured():
    assert cost_model.measure_loopback_bandwidth(4 * 2**20, repeats=1) > 1e7


@pytest.mark.parametrize("argv, match", [
    (["--workers", "1"], "--workers must be at least 2. Received: --workers=1"),
    (["--global-batch", "7"], "--global-batch must be divisible by --workers"),
    (["--only", "bogus"], r"--only names unknown settings \['bogus'\]"),
])
def test_bad_arguments_fail_at_once(capsys, argv, match):
    assert main(["bench", *argv]) == 2
    assert re.search(match, capsys.readouterr().err)


def test_list_names_every_setting(capsys):
    assert main(["bench", "--list", "--workers", "4"]) == 0
    out = capsys.readouterr().out
    for key in ("process1", "processN", "mirrored", "workers", "workers-float16",
                "workers-steps4", "workers-tcp", "model_parallel"):
        assert key in out
    assert "4 workers float16" in out


@pytest.mark.multiworker
def test_bench_prints_a_table_and_writes_json_and_png(capsys, tmp_path):
    argv = ["bench", "--only",
            "process1,processN,compute,workers-float16,workers-tcp-float16,model_parallel",
            "--width", "16", "--depth", "2", "--steps", "2", "--rounds", "1",
            "--global-batch", "32", "--out", str(tmp_path)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "2/6" in captured.err  # the progress bar
    assert "1 process x 2 threads" in captured.out and "loopback bandwidth" in captured.out
    data = json.loads((tmp_path / "bench.json").read_text())
    rows = {r["key"]: r for r in data["results"]}
    assert set(rows) == {"process1", "processN", "compute", "workers-float16",
                         "workers-tcp-float16", "model_parallel"}
    assert all(r["examples_per_sec"] > 0 for r in rows.values())
    workers = rows["workers-float16"]
    assert workers["options"] == {"compression": "float16"}
    # 784 inputs, one hidden layer of 16, 10 classes; two bytes a number in float16.
    assert workers["gradient_bytes"] == ((784 * 16 + 16) + (16 * 10 + 10)) * 2
    for key in ("all_reduce_seconds", "model_all_reduce_seconds", "predicted_step_seconds",
                "ratio"):
        assert workers[key] > 0
    ring = rows["workers-tcp-float16"]
    assert ring["options"] == {"transport": "tcp", "compression": "float16"}
    assert ring["gradient_bytes"] == workers["gradient_bytes"]
    assert ring["all_reduce_seconds"] > 0 and ring["transport_bandwidth"] > 0
    assert "through the tcp ring" in captured.out
    assert data["meta"]["global_batch"] == 32
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
