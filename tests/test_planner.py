"""mgpu_tf.plan: sizes, memory per device, the seed's rules, the step-time model, auto, the CLI."""

import json
import logging
import re

import keras
import pytest

import mgpu_tf
from mgpu_tf.cli import main as cli_main
from mgpu_tf.planner import PlanError, memory, parse_size, recommend
from mgpu_tf.strategies import factory as strategies
from support import models
from support import planner_models

MiB = 2**20


@pytest.mark.parametrize("text, expected", [
    ("80GiB", 80 * 2**30), ("80 GB", 80 * 10**9), ("512MiB", 512 * MiB), ("1.5 GiB", 3 * 2**29),
    (4096, 4096), ("100", 100), ("2 tb", 2 * 10**12)])
def test_sizes_are_read_in_binary_and_decimal_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("value, error, message", [
    ("eighty", ValueError, "`device_memory` must be a size: a number with an optional unit"),
    ("80 Gx", ValueError, "`device_memory` must be a size"),
    (0, ValueError, "`device_memory` must be positive. Received: device_memory=0"),
    ("-5GB", ValueError, "`device_memory` must be a size"),
    ([80], TypeError, "`device_memory` must be a size such as '80GiB'"),
    (True, TypeError, "`device_memory` must be a size such as '80GiB'")])
def test_a_declared_memory_that_is_not_a_size_fails_with_the_fix(value, error, message):
    with pytest.raises(error, match=message):
        mgpu_tf.plan(models.mlp(), devices=2, device_memory=value, global_batch_size=8)


def test_one_device_holds_params_gradients_two_adam_slots_and_saved_activations():
    model = models.mlp((16, 1), inputs=8)  # (8*16 + 16) + (16 + 1) = 161 float32 weights
    result = mgpu_tf.plan(model, devices=1, device_memory="1GiB", global_batch_size=32,
                          measure_compute=False)
    footprint = result.recommended.footprints[0]
    assert result.recommended.name == "one_device"
    assert (footprint.params, footprint.gradients, footprint.optimizer) == (644, 644, 1288)
    assert footprint.workspace == 3 * 8 * 16 * 4  # Adam's update of the largest weight
    # Kept for the backward pass: the input (the first kernel's gradient reads it), the
    # tanh output (tanh's gradient and the second kernel's read it) and the output (the
    # loss reads it); not the pre-activation sum. 4 bytes each, 32 examples.
    assert footprint.activations == 32 * (8 + 16 + 1) * 4
    double = mgpu_tf.plan(model, devices=1, device_memory="1GiB", global_batch_size=64,
                          measure_compute=False).recommended.footprints[0]
    assert double.activations == 2 * footprint.activations


@pytest.mark.parametrize("optimizer, slots", [
    ("sgd", 0), (keras.optimizers.SGD(momentum=0.9), 1), ("rmsprop", 1), ("adam", 2),
    (keras.optimizers.Adam(amsgrad=True), 3)])
def test_optimizer_slots_follow_the_optimizer(optimizer, slots):
    assert memory.optimizer_slots(optimizer) == slots


def test_an_unknown_optimizer_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="`optimizer` must be one of adadelta, adagrad, adam"):
        mgpu_tf.plan(models.mlp(), devices=2, global_batch_size=8, optimizer="bogus")


def test_stage_shares_are_what_model_parallel_places():
    placed = mgpu_tf.ModelParallel(planner_models.lopsided(), 2)
    result = mgpu_tf.plan(planner_models.lopsided(), devices=2, device_memory="1GiB",
                          global_batch_size=8, measure_compute=False)
    option = next(o for o in result.options if o.name == "model")
    assert option.strategy == "model_parallel"
    assert [f.params for f in option.footprints] == [s.param_bytes for s in placed.plan]


def test_a_model_that_fits_one_device_gets_data_parallelism():
    result = mgpu_tf.plan(planner_models.lopsided(), devices=4, device_memory="1GiB",
                          global_batch_size=64, measure_compute=False)
    assert [o.name for o in result.options] == ["data", "model"]
    assert result.recommended.strategy == "mirrored"
    assert result.reason.startswith("data parallel (mirrored over 4 devices): the whole model "
                                    "fits one device")


def test_a_model_too_big_for_one_device_gets_model_parallelism():
    # With LAMB (Adam's slots, not element-wise, so not sharded): the whole model needs
    # ~32.6 MiB, the stage of its largest layer ~29.5 MiB.
    result = mgpu_tf.plan(planner_models.lopsided(), devices=4, device_memory="31MiB",
                          global_batch_size=64, optimizer="lamb", measure_compute=False)
    best = result.recommended
    assert (best.name, best.strategy, best.fits) == ("model", "model_parallel", True)
    assert not result.options[1].fits
    assert result.reason.startswith("model parallel (4 stages): a model too big for one device")


def test_a_very_large_model_on_several_workers_gets_both():
    result = mgpu_tf.plan(planner_models.lopsided(), devices=4, workers=3, device_memory="31MiB",
                          global_batch_size=96, optimizer="lamb", measure_compute=False)
    best = result.recommended
    assert (best.name, best.strategy, best.options) == ("hybrid", "hybrid",
                                                        {"devices_per_worker": 4})
    assert (best.pipelines, best.batch) == (3, 32)
    assert "very large models want both" in result.reason


def test_a_model_that_does_not_fit_even_split_says_by_how_much():
    even = models.mlp((1024, 1024, 1024, 1), inputs=1024)  # three layers of ~28 MiB with Adam
    with pytest.raises(PlanError, match=r"The model does not fit the devices even fully split: "
                       r"the layout needing the least, a pipeline of 2 stages, one per device, "
                       r"each stage processing all 8 examples, needs 44.* on its fullest device, "
                       r"which has 30.00 MiB: 14.* short\. .*Use 3 devices per machine: a "
                       r"pipeline of 3 stages"):
        mgpu_tf.plan(even, devices=2, device_memory="30MiB", global_batch_size=8,
                     measure_compute=False)


def _sequence_model():
    """Six Dense layers over 64 positions: small weights, large activations."""
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((64, 32))]
                            + [keras.layers.Dense(64, activation="gelu") for _ in range(5)]
                            + [keras.layers.Dense(10)])


def test_the_message_names_one_layout_and_the_fewest_devices_that_fit():
    model = _sequence_model()
    with pytest.raises(PlanError) as caught:
        mgpu_tf.plan(model, devices=4, device_memory="1MiB", global_batch_size=64,
                     measure_compute=False)
    message = str(caught.value)
    # Over the 4 devices, a recomputing pipeline needs least: each of its stages sees the
    # whole batch, in micro-batches.
    assert message.startswith(
        "The model does not fit the devices even fully split: the layout needing the least, "
        "a pipeline of 4 stages, one per device, each stage processing all 64 examples, "
        "recomputing over 64 micro-batches, needs "), message
    assert "Received: devices=4, workers=1, device_memory=1.00 MiB, global_batch_size=64. " \
        in message
    found = re.search(r"Use (\d+) devices per machine: data parallel over \1 devices, "
                      r"(\d+) examples? each, needs", message)
    assert found, message
    # Checked against plans for those devices: they fit, and one device fewer does not.
    devices = int(found.group(1))
    fits = mgpu_tf.plan(model, devices=devices, device_memory="1MiB", global_batch_size=64,
                        measure_compute=False).recommended
    assert (fits.name, fits.fits, fits.batch) == ("data", True, int(found.group(2)))
    with pytest.raises(PlanError):
        mgpu_tf.plan(model, devices=devices - 1, device_memory="1MiB", global_batch_size=64,
                     measure_compute=False)


_SIZE = r"\d+(?:\.\d+)? (?:B|KiB|MiB|GiB)"
_ROW = re.compile(rf"\d+\s+(?P<name>\w+)\s+\S+\s+\d+x\d+\s+(?P<batch>\d+)\s+(?P<total>{_SIZE})"
                  rf"\s+(?P<state>{_SIZE})\s+(?P<activations>{_SIZE})\s+"
                  rf"(?P<temporaries>{_SIZE})\s+(yes|no)")


def _bytes(text):
    number, unit = text.split()
    return float(number) * {"B": 1, "KiB": 2**10, "MiB": MiB, "GiB": 2**30}[unit]


def _table_rows(result):
    rows = [_ROW.match(line) for line in result.table().splitlines()[1:]]
    return {row["name"]: row for row in rows if row}


def test_each_row_of_the_table_adds_up_and_says_what_its_parts_are():
    model = models.mlp((16, 1), inputs=8)  # 161 float32 weights
    result = mgpu_tf.plan(model, devices=4, device_memory="1GiB", global_batch_size=32,
                          measure_compute=False)
    rows = _table_rows(result)
    assert sorted(rows) == ["data", "model"]
    # Weights, gradients and Adam's two slots: 4 copies of 161 x 4 bytes on a data device;
    # the first stage holds the first layer, 8 x 16 + 16 weights.
    assert rows["data"]["state"] == memory.format_size(161 * 4 * 4)
    assert rows["model"]["state"] == memory.format_size(144 * 4 * 4)
    # 8 examples per device: the input, tanh's output and the output, 4 bytes each.
    assert rows["data"]["activations"] == memory.format_size(8 * (8 + 16 + 1) * 4)
    for row in rows.values():
        parts = sum(_bytes(row[k]) for k in ("state", "activations", "temporaries"))
        assert _bytes(row["total"]) == pytest.approx(parts, abs=0.015 * 2**10), row.groupdict()
    text = str(result)
    assert "per device, on the fullest device = params+grads+opt (weights, gradients, " \
        "optimizer slots)\n  + activations" in text
    assert "each stage of a\n  pipeline (model, hybrid) processes all of them" in text


def test_a_stage_holds_less_state_than_the_whole_model_and_sees_the_whole_batch():
    # The report: a 1x4 pipeline's row showed more "params+grads+opt" than the whole model
    # needs under data parallelism; that column held the temporaries too.
    model = _sequence_model()
    rows = _table_rows(mgpu_tf.plan(model, devices=4, device_memory="64MiB",
                                    global_batch_size=64, measure_compute=False))
    whole = 16 * model.count_params()  # float32 weights, gradients and two Adam slots
    assert rows["data"]["state"] == memory.format_size(whole)
    assert _bytes(rows["model"]["state"]) < whole / 2
    assert (int(rows["data"]["batch"]), int(rows["model"]["batch"])) == (16, 64)
    assert _bytes(rows["model"]["activations"]) > _bytes(rows["data"]["activations"])


def test_the_step_time_is_the_ring_all_reduce_cost_model_without_jitter():
    model = planner_models.lopsided()
    result = mgpu_tf.plan(model, devices=8, device_memory="80GiB", global_batch_size=256,
                          interconnect="pcie", compute_seconds=0.05, jitter=0)
    gradient_bytes = 4 * sum(w.numpy().size for w in model.trainable_weights)
    # Ring over 8 devices: 2 * 7/8 of the bytes at 12 GB/s, 14 hops of 10 us.
    expected = 0.05 + 2 * 7 / 8 * gradient_bytes / 12e9 + 14 * 10e-6
    data = result.recommended
    assert data.step_seconds == pytest.approx(expected, rel=1e-9)
    assert data.efficiency == pytest.approx(0.05 / expected, rel=1e-9)


def test_an_unknown_interconnect_lists_the_known_ones():
    with pytest.raises(ValueError, match="Unknown interconnect 'infiniband'. Known: pcie, nvlink"):
        mgpu_tf.plan(models.mlp(), devices=2, global_batch_size=8, interconnect="infiniband")


def test_auto_with_a_model_that_fits_keeps_its_choice_and_says_so(caplog):
    with caplog.at_level(logging.INFO, logger="mgpu_tf"):
        strategy = mgpu_tf.make_strategy("auto", model=planner_models.lopsided())
    assert mgpu_tf.strategy_kind(strategy) == "default"
    assert any("the model fits one device" in r.getMessage() for r in caplog.records)


def _with_lamb(model):
    model.compile(keras.optimizers.Lamb(), "mse")  # Adam's slots, which sharding cannot cut
    return model


def test_auto_with_a_model_too_big_for_one_device_splits_it():
    strategy = mgpu_tf.make_strategy("auto", model=_with_lamb(planner_models.lopsided()),
                                     device_memory="31MiB")
    assert mgpu_tf.strategy_kind(strategy) == "model_parallel"
    assert len(strategy.devices) == 4


def test_auto_in_a_cluster_with_a_model_too_big_for_one_device_chooses_hybrid():
    cluster = json.dumps({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                          "task": {"type": "worker", "index": 0}})
    kind, reason, options = recommend.auto_strategy(
        _with_lamb(planner_models.lopsided()), "multi_worker", "a cluster was given",
        {"cluster": cluster}, "31MiB")
    assert kind == "hybrid" and options == {"cluster": cluster, "devices_per_worker": 4}
    assert "very large models want both" in reason


def test_auto_with_a_model_that_never_fits_fails_before_training():
    with pytest.raises(PlanError, match="does not fit the devices even fully split"):
        mgpu_tf.make_strategy("auto", model=planner_models.lopsided(), device_memory="1.2MiB")


def test_device_memory_without_a_model_is_refused():
    with pytest.raises(ValueError, match="`device_memory` is for planning a model"):
        mgpu_tf.make_strategy("auto", device_memory="16GiB")
    assert "model" in strategies.OPTIONS


def test_auto_plans_for_the_global_batch_size_it_is_given():
    # 48 MiB devices hold the model with a batch of 32, not with 16384 however it is cut.
    model = planner_models.lopsided()
    strategy = mgpu_tf.make_strategy("auto", model=model, device_memory="48MiB")
    assert mgpu_tf.strategy_kind(strategy) == "default"
    with pytest.raises(PlanError, match="Received: devices=4, workers=1, "
                       "device_memory=48.00 MiB, global_batch_size=16384"):
        mgpu_tf.make_strategy("auto", model=model, device_memory="48MiB",
                              global_batch_size=16384)


@pytest.mark.parametrize("kind, options, error, match", [
    ("auto", {"global_batch_size": 64}, ValueError,
     "`global_batch_size` is for planning a model: pass `model` too. Received: "
     "global_batch_size=64, model=None"),
    ("auto", {"model": "m", "global_batch_size": 0}, ValueError,
     "`global_batch_size` must be at least 1. Received: global_batch_size=0"),
    ("auto", {"model": "m", "global_batch_size": 6.5}, TypeError,
     "`global_batch_size` must be an integer. Received: global_batch_size=6.5"),
    ("mirrored", {"global_batch_size": 64}, ValueError,
     "`global_batch_size` does not apply to strategy 'mirrored'; it applies to 'auto' only, "
     "with `model`"),
])
def test_auto_global_batch_size_is_checked_before_planning(kind, options, error, match):
    with pytest.raises(error, match=re.escape(match)):
        mgpu_tf.make_strategy(kind, **options)
    assert "global_batch_size" in strategies.OPTIONS


def test_cli_prints_the_recommendation_for_declared_devices(capsys):
    code = cli_main(["plan", "--model", "support.planner_models:lopsided",
                     "--global_batch_size", "64", "--devices", "8", "--device_memory", "31MiB",
                     "--optimizer", "lamb", "--no_measure"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("recommended: model parallel (4 stages)")
    assert "1 worker(s) x 8 device(s) of 31.00 MiB" in out


@pytest.mark.parametrize("spec, message", [
    ("support.planner_models.lopsided", "--model must be MODULE:FUNCTION"),
    ("no_such_module:build", "--model: could not import the module 'no_such_module': "
     "ModuleNotFoundError"),
    ("support.planner_models:nothing",
     "--model: the module 'support.planner_models' has no 'nothing'"),
    ("support.planner_models:NOT_CALLABLE",
     "--model: 'NOT_CALLABLE' in 'support.planner_models' is not a function"),
    ("support.planner_models:failing",
     "--model: calling failing\\(\\) from 'support.planner_models' failed: RuntimeError: no data"),
    ("support.planner_models:not_a_model",
     "--model: not_a_model\\(\\) returned int, not a Keras model"),
])
def test_cli_says_which_part_of_the_model_function_failed(spec, message, capsys):
    code = cli_main(["plan", "--model", spec, "--global_batch_size", "8", "--no_measure"])
    err = capsys.readouterr().err
    assert code == 2
    assert re.match("mgpu-tf plan: " + message, err), err


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_cli_plans_a_saved_model(capsys, tmp_path, suffix):
    path = tmp_path / f"best{suffix}"
    planner_models.lopsided().save(path)
    code = cli_main(["plan", "--model", str(path), "--global_batch_size", "64", "--devices",
                     "8", "--device_memory", "31MiB", "--optimizer", "lamb", "--no_measure"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("recommended: model parallel (4 stages)")


@pytest.mark.parametrize("name, content, message", [
    ("missing.keras", None, "--model names a saved model that does not exist. Received: "
     "--model='{path}'"),
    ("broken.keras", b"not a model", "--model names a file that could not be read as a Keras "
     "model: it is not a zip archive, as .keras files are (it starts with b'not a mo')."),
    ("empty_zip.keras", b"PK\x05\x06" + bytes(18),
     "--model: Keras could not load the saved model: "),
])
def test_cli_says_why_a_saved_model_cannot_be_read(capsys, tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    code = cli_main(["plan", "--model", str(path), "--global_batch_size", "8", "--no_measure"])
    assert code == 2
    assert capsys.readouterr().err.startswith("mgpu-tf plan: " + message.format(path=path))


def test_cli_rejects_a_memory_that_is_not_a_size(capsys):
    code = cli_main(["plan", "--model", "support.planner_models:lopsided",
                     "--global_batch_size", "8", "--device_memory", "lots"])
    assert code == 2
    assert "`--device_memory` must be a size" in capsys.readouterr().err


def test_cli_exits_1_when_the_model_does_not_fit(capsys):
    code = cli_main(["plan", "--model", "support.planner_models:lopsided",
                     "--global_batch_size", "8", "--devices", "2", "--device_memory", "4MiB",
                     "--optimizer", "sgd"])
    assert code == 1
    assert "4.00 MiB, " in capsys.readouterr().err
