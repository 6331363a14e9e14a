"""`mgpu-tf bench`, the fresh-process runner under it, and the ring all-reduce cost model."""

import contextlib
import io
import json
import math
import os
import re
import time

import keras
import pytest

from mgpu_tf.cli import main
from mgpu_tf.planner import bench
from mgpu_tf.planner import cost_model
from mgpu_tf.planner.bench import report, runner


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


def test_loopback_bandwidth_is_a_positive_finite_rate_in_bytes_per_second():
    # Its speed is a benchmark's figure (docs/benchmarks.md); here, that it is measured.
    measured = cost_model.measure_loopback_bandwidth(2**20, repeats=1)
    assert isinstance(measured, float) and math.isfinite(measured) and measured > 0, measured


def test_runner_returns_the_fresh_process_result_with_its_environment(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"task": {"type": "worker", "index": 5}}')
    assert runner.run_in_fresh_process(math.sqrt, 2.0) == pytest.approx(2 ** 0.5)
    assert runner.run_in_fresh_process(os.getenv, "TF_CONFIG") is None
    assert runner.run_in_fresh_process(os.getenv, "TF_NUM_INTRAOP_THREADS", threads=3) == "3"
    assert runner.run_in_fresh_process(os.getenv, "BENCH_X", env={"BENCH_X": "y"}) == "y"


@pytest.mark.multiworker
def test_runner_returns_worker_0s_result_from_a_cluster():
    config = json.loads(runner.run_in_fresh_process(os.getenv, "TF_CONFIG", workers=2))
    assert config["task"] == {"type": "worker", "index": 0}
    assert len(config["cluster"]["worker"]) == 2


def test_runner_error_names_the_function_and_ends_with_the_childs_stderr():
    with pytest.raises(runner.FreshProcessError,
                       match="sqrt must exit with 0 and print its result in a fresh process. "
                       "Received: exit code 1, no result") as error:
        runner.run_in_fresh_process(math.sqrt, "four")
    assert str(error.value).rstrip().endswith("TypeError: must be real number, not str")


def test_runner_stops_a_process_that_runs_out_of_time():
    start = time.monotonic()
    with pytest.raises(runner.FreshProcessError,
                       match=r"sleep must finish within timeout=1 s\. Received: still running"):
        runner.run_in_fresh_process(time.sleep, 60, timeout=1)
    assert time.monotonic() - start < 60  # stopped, not slept to the end


def test_runner_refuses_a_function_a_fresh_process_cannot_import():
    with pytest.raises(TypeError, match="`function` must be a module-level function"):
        runner.run_in_fresh_process(lambda payload: payload, 1)


@pytest.mark.parametrize("argv, match", [
    (["--workers", "1"], "--workers must be at least 2. Received: --workers=1"),
    (["--global_batch_size", "7"], "--global_batch_size must be divisible by --workers"),
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


def test_list_gives_each_setting_a_line_of_key_and_name_apart(capsys):
    assert main(["bench", "--list", "--workers", "2"]) == 0
    known = {s.key: s.name for s in bench.default_settings(2)}
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(known)
    for line in lines:
        key, name = re.split(r"\s{2,}", line, maxsplit=1)
        assert known[key] == name, line


@pytest.mark.parametrize("only, added", [
    ("process1,mirrored,workers,model_parallel", ["processN"]),
    ("workers-mixed_bfloat16", ["processN-mixed_bfloat16"]),
])
def test_only_brings_in_the_baseline_of_the_ratio_column(capsys, only, added):
    assert main(["bench", "--only", only, "--list"]) == 0
    keys = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert sorted(keys) == sorted(only.split(",") + added)


_ONLY = ["process1", "processN", "compute", "workers-float16", "workers-tcp-float16",
         "model_parallel"]


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """One small `mgpu-tf bench` run: (exit code, stdout, stderr, bench.json, out folder)."""
    out = tmp_path_factory.mktemp("bench")
    argv = ["bench", "--only", ",".join(_ONLY), "--width", "16", "--depth", "2", "--steps",
            "2", "--rounds", "1", "--global_batch_size", "32", "--out", str(out)]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    data = json.loads((out / "bench.json").read_text()) if code == 0 else None
    return code, stdout.getvalue(), stderr.getvalue(), data, out


def _rows(bench_run):
    code, out, err, data, _ = bench_run
    assert code == 0, out + err
    return {r["key"]: r for r in data["results"]}


@pytest.mark.multiworker
def test_bench_prints_a_table_and_writes_json_and_png(bench_run):
    code, out, err, data, folder = bench_run
    rows = _rows(bench_run)
    assert "2/6" in err  # the progress bar
    assert "1 process x 2 threads" in out and "loopback bandwidth" in out
    assert set(rows) == set(_ONLY)
    workers = rows["workers-float16"]
    assert workers["options"] == {"compression": "float16"}
    # 784 inputs, one hidden layer of 16, 10 classes; two bytes a number in float16.
    assert workers["gradient_bytes"] == ((784 * 16 + 16) + (16 * 10 + 10)) * 2
    ring = rows["workers-tcp-float16"]
    assert ring["options"] == {"transport": "tcp", "compression": "float16"}
    assert ring["gradient_bytes"] == workers["gradient_bytes"]
    assert "through the tcp ring" in out
    assert data["meta"]["global_batch"] == 32
    assert (folder / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.multiworker
def test_bench_examples_per_second_are_the_global_batch_over_the_step(bench_run):
    # --global_batch_size 32 over all replicas; "compute" is one worker's share of 2.
    batch = {"compute": 16}
    for key, row in _rows(bench_run).items():
        assert row["examples_per_sec"] * row["step_seconds"] == pytest.approx(
            batch.get(key, 32)), key


@pytest.mark.multiworker
def test_bench_ratios_are_against_one_process_of_two_threads_in_the_same_round(bench_run):
    rows = _rows(bench_run)
    base = rows["processN"]["examples_per_sec"]
    assert "ratio" not in rows["processN"]
    for key in ("process1", "workers-float16", "workers-tcp-float16", "model_parallel"):
        assert rows[key]["ratio"] == pytest.approx(rows[key]["examples_per_sec"] / base), key


@pytest.mark.multiworker
def test_bench_whole_run_ratios_are_the_baselines_fit_over_the_settings(bench_run):
    rows = _rows(bench_run)
    base = rows["processN"]["fit_seconds"]
    assert "fit_ratio" not in rows["processN"]
    for key, row in rows.items():
        assert math.isfinite(row["fit_seconds"]) and row["fit_seconds"] > 0, key
    for key in ("process1", "workers-float16", "workers-tcp-float16", "model_parallel"):
        assert rows[key]["fit_ratio"] == pytest.approx(base / rows[key]["fit_seconds"]), key


@pytest.mark.multiworker
@pytest.mark.parametrize("key", ["workers-float16", "workers-tcp-float16"])
def test_bench_model_figures_follow_the_ring_formula_by_hand(bench_run, key):
    rows = _rows(bench_run)
    row = rows[key]
    size, latency = row["gradient_bytes"], row["latency_seconds"]
    # Two workers: each sends 2 (2 - 1) / 2 = all of the bytes, after the fixed cost.
    assert row["model_all_reduce_seconds"] == pytest.approx(latency + size / row["bandwidth"])
    link = latency + size / row["transport_bandwidth"]
    assert row["link_model_all_reduce_seconds"] == pytest.approx(link)
    # A worker's 1-thread computation, one gradient all-reduce, one all-reduce of the logs.
    assert row["predicted_step_seconds"] == pytest.approx(
        rows["compute"]["step_seconds"] + link + latency)


@pytest.mark.multiworker
@pytest.mark.parametrize("key", ["workers-float16", "workers-tcp-float16"])
def test_bench_timed_figures_are_positive_finite_seconds(bench_run, key):
    # Figures of one kind, not their order: which is faster is the benchmark's to print.
    row = _rows(bench_run)[key]
    for name in ("step_seconds", "all_reduce_seconds", "latency_seconds", "fit_seconds"):
        assert isinstance(row[name], float), (name, row)
        assert math.isfinite(row[name]) and row[name] > 0, (name, row)
    for name in ("bandwidth", "transport_bandwidth"):  # bytes per second
        assert math.isfinite(row[name]) and row[name] > 0, (name, row)


def _table(out):
    """{row name: [its cells, right-aligned under the header's labels]}, from the printed table."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("setting "))
    header, cells = lines[start], {}
    ends = [header.index(label) + len(label) for label in (
        "ex/s", "ratio", "fit s", "fit ratio", "step ms", "comm ms", "tcp ms", "link ms",
        "pred ms")]
    for line in lines[start + 1:]:
        if line.startswith(("loopback bandwidth", "fit s:")):
            break
        bounds = zip([ends[0] - 9] + ends[:-1], ends)
        cells[line[:ends[0] - 9].rstrip()] = [line[a:b].strip() for a, b in bounds]
    return cells


@pytest.mark.multiworker
def test_bench_table_rows_show_the_json_figures(bench_run):
    rows, out = _rows(bench_run), bench_run[1]
    table = _table(out)
    assert list(table) == [r["name"] for r in rows.values()]
    for row in rows.values():
        expected = [f"{row['examples_per_sec']:.0f}"]
        expected += [f"{row[k]:.2f}" if k in row else "" for k in (
            "ratio", "fit_seconds", "fit_ratio")]
        expected += [f"{row[k] * 1e3:.1f}" if k in row else "" for k in (
            "step_seconds", "all_reduce_seconds", "model_all_reduce_seconds",
            "link_model_all_reduce_seconds", "predicted_step_seconds")]
        assert table[row["name"]] == expected, row["name"]
    ring = rows["workers-tcp-float16"]["transport_bandwidth"] / 1e9
    assert f"{ring:.2f} GB/s through the tcp ring" in out
    assert f"loopback bandwidth: {rows['workers-float16']['bandwidth'] / 1e9:.2f} GB/s" in out


def test_whole_run_ratios_come_from_the_fits_seconds_paired_by_round():
    chosen = [s for s in bench.default_settings(2) if s.key in ("processN", "process1")]
    # The 1-thread process steps slower but, here, fits faster in two rounds of three.
    figures = {"processN": [(1000, 4.0), (1000, 5.0), (1000, 6.0)],
               "process1": [(500, 3.0), (500, 6.0), (500, 4.0)]}
    runs = {s.name: [{"examples_per_sec": e, "step_seconds": 256 / e, "fit_seconds": f}
                     for e, f in figures[s.key]] for s in chosen}
    rows = {r["key"]: r for r in bench.summarise(chosen, runs)}
    # By hand: 4/3, 5/6 and 6/4, median 4/3; the median fit, 5.0 s for both.
    assert rows["process1"]["fit_ratio"] == pytest.approx(4.0 / 3.0)
    assert rows["process1"]["ratio"] == pytest.approx(0.5)
    assert rows["process1"]["fit_seconds"] == pytest.approx(4.0)
    assert rows["processN"]["fit_seconds"] == pytest.approx(5.0)
    assert "fit_ratio" not in rows["processN"]
    table = bench.format_table(list(rows.values()))
    assert re.search(r"1 process x 1 thread +500 +0\.50 +4\.00 +1\.33 ", table), table


def test_the_plot_draws_ratios_to_one_process_beside_the_cost_models(tmp_path):
    rows = [
        {"name": "1 process", "group": "process", "count": 1, "examples_per_sec": 1000.0,
         "step_seconds": 0.032},
        # 0.8 of one process in 10 ms a step; the model predicts 8 ms, i.e. 0.8 * 10 / 8.
        {"name": "2 workers", "group": "workers", "count": 2, "examples_per_sec": 800.0,
         "ratio": 0.8, "step_seconds": 0.010, "predicted_step_seconds": 0.008},
        {"name": "2 devices", "group": "devices", "count": 2, "examples_per_sec": 1600.0,
         "ratio": 1.6, "step_seconds": 0.020},
    ]
    points = report.plot_points(rows)
    assert [(name, ratio) for name, ratio, _ in points] == [("2 workers", 0.8),
                                                            ("2 devices", 1.6)]
    assert points[0][2] == pytest.approx(1.0) and points[1][2] is None
    bench.write_plot(rows, tmp_path / "bench.png")
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
