"""`mgpu-tf bench` with Keras' speed switches: the twins, their flags and their figures."""

import statistics

import pytest

from mgpu_tf.cli import main
from mgpu_tf.planner import bench


def test_the_main_settings_get_a_twin_with_the_switches():
    settings = bench.default_settings(2)
    twins = bench.switched(settings, jit_compile=True, steps_per_execution=8)
    assert [t.base for t in twins] == [s.key for s in settings if s.key in bench.settings.SWITCHED]
    for twin in twins:
        assert twin.key == f"{twin.base}+switches"
        assert dict(twin.compile) == {"jit_compile": True, "steps_per_execution": 8}
        assert twin.name.endswith("jit_compile=True, steps_per_execution=8")


@pytest.mark.parametrize("argv, message", [
    (["--jit_compile", "maybe"], "--jit_compile: `jit_compile` must be one of auto, true, "),
    (["--steps-per-execution", "0"], "--steps_per_execution: `steps_per_execution` must be at "),
])
def test_bad_switches_are_refused_before_anything_runs(capsys, argv, message):
    assert main(["bench", "--list", *argv]) == 2
    assert message in capsys.readouterr().err


def test_only_brings_the_twin_its_base_and_the_default_pair(capsys):
    assert main(["bench", "--list", "--only", "workers", "--steps_per_execution", "4"]) == 0
    keys = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert sorted(keys) == ["processN", "processN+switches", "workers", "workers+switches"]


def _run(examples_per_sec):
    return {"examples_per_sec": examples_per_sec, "step_seconds": 256 / examples_per_sec}


def test_speed_ups_are_paired_by_round():
    chosen = {s.key: s for s in bench.default_settings(2) if s.key in ("processN", "mirrored")}
    twins = {t.key: t for t in bench.switched(list(chosen.values()))}
    settings = [*chosen.values(), *twins.values()]
    figures = {"processN": [100, 120], "processN+switches": [150, 150],
               "mirrored": [50, 40], "mirrored+switches": [100, 100]}
    keys = {s.name: s.key for s in settings}
    runs = {s.name: [_run(v) for v in figures[s.key]] for s in settings}
    rows = {keys[r["name"]]: r for r in bench.summarise(settings, runs)}
    # By hand, round by round: mirrored 100/50 and 100/40; the default 150/100 and 150/120.
    assert rows["mirrored+switches"]["switch_speedup"] == pytest.approx(
        statistics.median([2.0, 2.5]))
    assert rows["mirrored+switches"]["speedup_vs_default"] == pytest.approx(
        statistics.median([2.0 / 1.5, 2.5 / 1.25]))
    assert rows["processN+switches"]["switch_speedup"] == pytest.approx(
        statistics.median([1.5, 1.25]))
    assert "speedup_vs_default" not in rows["processN+switches"]
    # The twin's ratio is against the default strategy with the same switches.
    assert rows["mirrored+switches"]["ratio"] == pytest.approx(100 / 150)
    table = bench.format_table(list(rows.values()))
    assert "with the speed switches" in table
    assert f"{statistics.median([2.0 / 1.5, 2.5 / 1.25]):.2f}" in table


def test_whole_run_speed_ups_come_from_the_fits_seconds_paired_by_round():
    chosen = {s.key: s for s in bench.default_settings(2) if s.key in ("processN", "mirrored")}
    twins = {t.key: t for t in bench.switched(list(chosen.values()))}
    settings = [*chosen.values(), *twins.values()]
    # Steps twice as fast with the switches, but the compile makes the whole fit slower.
    figures = {"processN": [(100, 10.0), (100, 12.0)],
               "processN+switches": [(200, 8.0), (200, 15.0)],
               "mirrored": [(50, 20.0), (50, 20.0)],
               "mirrored+switches": [(100, 25.0), (100, 16.0)]}
    keys = {s.name: s.key for s in settings}
    runs = {s.name: [{**_run(e), "fit_seconds": f} for e, f in figures[s.key]]
            for s in settings}
    rows = {keys[r["name"]]: r for r in bench.summarise(settings, runs)}
    # By hand, without over with: the default 10/8 and 12/15, mirrored 20/25 and 20/16.
    assert rows["processN+switches"]["fit_switch_speedup"] == pytest.approx(
        statistics.median([1.25, 0.8]))
    assert rows["mirrored+switches"]["fit_switch_speedup"] == pytest.approx(
        statistics.median([0.8, 1.25]))
    assert rows["mirrored+switches"]["fit_speedup_vs_default"] == pytest.approx(
        statistics.median([0.8 / 1.25, 1.25 / 0.8]))
    assert rows["mirrored+switches"]["switch_speedup"] == pytest.approx(2.0)
    # The twin's whole-run ratio is against the default strategy with the same switches.
    assert rows["mirrored+switches"]["fit_ratio"] == pytest.approx(
        statistics.median([8 / 25, 15 / 16]))
    table = bench.format_table(list(rows.values()))
    assert "fit speed-up" in table
