"""keras_guard/'s own logic: the checks between runs, the declarations, the areas, the session's
arguments. No TensorFlow: the runs themselves are `nox -s keras_guard`."""

import pathlib
import re
import runpy
import sys
import tomllib
import types

import pytest

from keras_guard import areas, compare, differences, plugin, reach, run, sdist

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _declared(node):
    return {"t.py::fails": differences.Difference(("t.py::fails",), differences.Kind.FAILS,
                                                  "why"),
            "t.py::flaky": differences.Difference(("t.py::flaky",), differences.Kind.FAILS,
                                                  "why not")}.get(node)


def test_compare_finds_each_kind_of_departure():
    alone = {"t.py::same": ["pass", "", 0], "t.py::patched": ["pass", "", 0],
             "t.py::strategy": ["pass", "", 0], "t.py::fails": ["pass", "", 0],
             "t.py::flaky": ["pass", "", 0], "t.py::broken": ["fail", "x", 0],
             "t.py::gone": ["pass", "", 0]}
    patched = dict(alone, **{"t.py::patched": ["fail", "boom", 0]})
    del patched["t.py::gone"]
    mirrored = dict(alone, **{"t.py::strategy": ["fail", "off by 2", 0],
                              "t.py::fails": ["fail", "", 0], "t.py::broken": ["pass", "", 0]})
    report = compare.compare(alone, patched, mirrored, declared=_declared)
    assert report.changed_by_patches == [("t.py::patched", "pass alone, fail patched: boom")]
    assert report.undeclared == [("t.py::strategy", "fail under mirrored: off by 2")]
    assert report.declared == [("t.py::fails", "why")]
    assert report.declared_but_passed == [("t.py::flaky", "why not")]
    assert report.missing == [("t.py::gone", "only in alone, mirrored")]
    assert not report.holds


def test_compare_holds_for_equal_runs_and_a_test_failing_everywhere():
    runs = {"t.py::a": ["pass", "", 0], "t.py::b": ["fail", "x", 0], "t.py::c": ["skip", "", 0]}
    report = compare.compare(runs, dict(runs), dict(runs), declared=_declared)
    assert report.holds
    assert compare.counts(runs) == {"pass": 1, "fail": 1, "skip": 1}


def test_a_difference_covers_its_node_ids_and_starred_prefixes_only():
    exact = differences.Difference(("f.py::C::test_a",), differences.Kind.FAILS, "r")
    assert exact.covers("f.py::C::test_a")
    assert not exact.covers("f.py::C::test_a_eager")
    starred = differences.Difference(("f.py::C::test_a*",), differences.Kind.FAILS, "r")
    assert starred.covers("f.py::C::test_a_eager") and not starred.covers("f.py::C::test_b")


def test_every_declared_difference_gives_a_reason_and_a_node_id():
    for difference in differences.DIFFERENCES:
        assert difference.reason and difference.tests, difference
        assert all("::" in t or t.endswith(".py") or t.endswith("*") for t in difference.tests)


def _report(when, outcome, **extra):
    return types.SimpleNamespace(when=when, outcome=outcome, failed=outcome == "failed",
                                 skipped=outcome == "skipped", **extra)


@pytest.mark.parametrize("report, expected", [
    (_report("call", "passed"), "pass"),
    (_report("call", "failed"), "fail"),
    (_report("call", "skipped"), "skip"),
    (_report("call", "skipped", wasxfail=""), "skip"),
    (_report("setup", "failed"), "fail"),
    (_report("setup", "skipped"), "skip"),
    (_report("setup", "passed"), None),
    (_report("teardown", "failed"), "fail"),
    (_report("teardown", "passed"), None),
])
def test_each_report_gives_one_outcome(report, expected):
    assert plugin.outcome_of(report) == expected


def test_the_areas_take_the_files_the_release_has(tmp_path):
    (tmp_path / "keras/src/trainers").mkdir(parents=True)
    assert areas.paths("ci", tmp_path) == ["keras/src/trainers"]
    with pytest.raises(ValueError, match="`area` must be one of ci, full"):
        areas.paths("all", tmp_path)
    assert set(areas.AREAS["ci"]) <= set(areas.AREAS["full"]) | {
        p for p in areas.AREAS["ci"] if p.endswith(".py")}


def test_the_ci_area_keeps_every_mode_of_each_family_and_leaves_the_rest_to_full():
    kept_modes = {}
    for name, cases, modes, kept in areas.FAMILIES:
        names = areas.family_names(name, cases, modes)
        assert kept and kept < set(names), name  # some left to full, some kept
        assert {mode for _, mode in kept} == (set(modes) or {None}), name
        for pair, test in names.items():
            node = f"keras/src/trainers/trainer_test.py::TestTrainer::{test}"
            assert areas.takes("ci", node) == (pair in kept), node
            assert areas.takes("full", node)
        kept_modes[name] = kept
    # A family's name that is another's prefix does not take the other's tests.
    assert areas.family_names("test_steps_per_epoch", ("match_one_epoch",), ("jit",)) == {
        ("match_one_epoch", "jit"): "test_steps_per_epoch_match_one_epoch_jit"}
    assert areas.takes("ci", "keras/src/trainers/trainer_test.py::TestTrainer::test_fit_flow_jit")
    with pytest.raises(ValueError, match="`area` must be one of ci, full"):
        areas.takes("quick", "x.py::t")


def test_the_ci_area_leaves_the_array_kinds_that_repeat_a_path_to_full():
    arrays = ("keras/src/trainers/data_adapters/array_data_adapter_test.py::"
              "TestArrayDataAdapter::test_basic_flow_")
    trainer = "keras/src/trainers/trainer_test.py::TestTrainer::"
    for left in (arrays + "np_float64_batch", arrays + "jax_sparse_float32_true",
                 trainer + "test_fit_sparse_jax_eager", trainer + "test_predict_generator_1_jit"):
        assert not areas.takes("ci", left) and areas.takes("full", left), left
    for kept in (arrays + "np_float32_batch", arrays + "tf_sparse_float32_true",
                 trainer + "test_fit_sparse_scipy_eager", trainer + "test_predict_generator_50_jit",
                 trainer + "test_fit_with_val_split_steps_per_epoch_jit"):
        assert areas.takes("ci", kept), kept


def test_an_old_class_name_stands_for_the_renamed_class_while_a_file_is_imported(monkeypatch):
    module = types.ModuleType("renamed_for_test")
    module.Trainer = object
    monkeypatch.setitem(sys.modules, "renamed_for_test", module)
    monkeypatch.setattr(plugin, "RENAMED", (("renamed_for_test", "OldTrainer", "Trainer"),
                                            ("renamed_for_test", "Trainer", "Gone"),
                                            ("not_a_module_here", "A", "B")))
    assert plugin._old_names() == [(module, "OldTrainer")]
    assert module.OldTrainer is object


def test_a_nightly_without_test_files_takes_the_release_before_it():
    assert sdist._requirements("keras-nightly", "3.16.0.dev2026102704") == [
        "keras-nightly==3.16.0.dev2026102704", "keras<3.16.0.dev2026102704"]


def test_the_session_takes_its_interpreter_from_its_arguments():
    take = runpy.run_path(str(ROOT / "noxfile.py"))["_keras_guard_args"]
    assert take(["--area", "full"]) == ("python", ["--area", "full"])
    assert take(["--python", "/v/bin/python", "--area", "full"]) == (
        "/v/bin/python", ["--area", "full"])
    with pytest.raises(ValueError, match="`--python` must be followed"):
        take(["--python"])


def test_the_readmes_suite_does_not_collect_the_harness():
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    assert settings["ini_options"]["testpaths"] == ["tests"]
    harness = ROOT / "keras_guard"
    assert all(ROOT / path not in [harness, *harness.parents] for path in
               settings["ini_options"]["testpaths"])


def _reached(reached, installed=True):
    return {"reached": reached, "installed": installed, "lines": "1/2", "where": "somewhere"}


def test_every_patch_has_an_acting_statement_to_look_for():
    source = (ROOT / "mgpu_tf" / "compat" / "patches.py").read_text()
    names = set(re.findall(r'^    \("(\w+)",$', source, flags=re.MULTILINE))
    assert names and names == set(reach.ACTING)
    for patch, (module, texts, _) in reach.ACTING.items():
        path = ROOT / "mgpu_tf" / "compat" / module
        assert reach._acting_lines(path, texts), f"{patch}: {texts} not in {module}"


def test_a_patch_installed_and_not_reached_fails_the_run_and_one_not_installed_does_not():
    found = {"a": _reached(True), "b": _reached(False), "c": _reached(False, installed=False),
             "d": _reached(None), "e": _reached(False, installed=None)}
    assert reach.unreached(found) == ["b", "d", "e"]
    assert [reach.verdict(f) for f in found.values()] == [
        "reached", "NOT reached", "not installed", "acting text gone", "NOT reached"]


def _outcomes(**tests):
    return {name: [outcome, "", 1.0, 0.5] for name, outcome in tests.items()}


def test_the_summary_counts_each_run_and_fails_on_an_unreached_patch():
    keras_tests = _outcomes(**{"k.py::a": "pass", "k.py::b": "fail"})
    added = f"{run.ADDED_FOLDER}/paths_test.py::p"  # skips but under mirrored
    outcomes = {"alone": dict(keras_tests, **_outcomes(**{added: "skip"})),
                "patched": dict(keras_tests, **_outcomes(**{added: "skip"})),
                "mirrored": dict(keras_tests, **_outcomes(**{added: "pass"}))}
    seconds = {"alone": [10, 8], "patched": [11, 9], "mirrored": [12, 10]}
    in_place = {"alone": [], "patched": ["a", "c"], "mirrored": ["a"]}
    holds, lines = run.summary("keras-3.15.1", outcomes, seconds, {"a": _reached(True)},
                               stack="TF + Keras", in_place=in_place)
    assert holds
    assert lines[0] == "Keras' own tests of keras-3.15.1 on TF + Keras (the three runs at once)"
    assert "  mirrored  1 passed, 1 failed, 0 skipped in 12 s (10 s of CPU)" in lines
    assert "  patches in place at the end: alone 0; patched 2; mirrored 1" in lines
    assert "  1 of 1 reached; every patch installed is to be reached" in lines
    holds, lines = run.summary("keras-3.15.1", outcomes, seconds,
                               {"a": _reached(True), "b": _reached(False),
                                "c": _reached(False, installed=False)},
                               stack="TF + Keras", jobs=1, in_place=in_place)
    assert not holds
    assert "patches installed under mirrored but not reached (1):" in lines
    assert "  b: somewhere" in lines
    assert "(the three runs 1 at a time)" in lines[0]
    holds, lines = run.summary("keras-3.15.1", outcomes, seconds, None, stack="TF + Keras",
                               in_place=dict(in_place, alone=["a"]))
    assert not holds  # the baseline ran with a patch in place
    assert "patches in place in the run of Keras alone (1):" in lines
