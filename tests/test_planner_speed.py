"""The planner's speed side: the compute in the user's units, the step model, the scaling table."""

import json
import math

import keras
import pytest

import mgpu_tf
from mgpu_tf.cli import main as cli_main
from mgpu_tf.planner import interconnect, step_model
from support import planner_models

MiB = 2**20


@pytest.fixture(scope="module")
def lopsided():
    model = planner_models.lopsided()
    return model, 4 * sum(int(w.numpy().size) for w in model.trainable_weights)


def test_the_step_adds_the_wait_for_the_slowest_device_to_the_ring(lopsided):
    model, gradients = lopsided
    result = mgpu_tf.plan(model, devices=4, device_memory="1GiB", global_batch_size=64,
                          interconnect="nvlink2", compute_seconds=0.1)
    # Slowest of 4 at 2% jitter: sqrt(2 ln 4) * 2% of the compute; 6 hops of 5 us.
    wait = 0.1 * 0.02 * math.sqrt(2 * math.log(4))
    ring = 2 * 3 / 4 * gradients / 120e9 + 6 * 5e-6
    assert result.recommended.step_seconds == pytest.approx(0.1 + wait + ring, rel=1e-9)
    assert [p.devices for p in result.scaling] == [1, 2, 4]
    assert result.scaling[0].step == 0.1


def test_the_tcp_ring_link_is_the_loopback_at_the_rings_measured_share(monkeypatch):
    from mgpu_tf.planner import cost_model

    measured = []

    def loopback(**kwargs):
        measured.append(kwargs)
        return 2.5e9

    monkeypatch.setattr(cost_model, "measure_loopback_bandwidth", loopback)
    link = interconnect.resolve_interconnect("loopback-tcp")
    # Both directions at once, as each worker of a ring of two sends and receives.
    assert measured == [{"streams": 2}]
    assert link.bandwidth == pytest.approx(2.5e9 * interconnect.TCP_RING_SHARE)
    # The bench's two workers: each sends all 11.7 MB once, after 2 hops of 50 us.
    prediction = step_model.predict_step(0.02, 11.7e6, 2, link, jitter=0)
    assert prediction.communication == pytest.approx(
        2 * 50e-6 + 11.7e6 / (2.5e9 * interconnect.TCP_RING_SHARE), rel=1e-9)
    assert interconnect.resolve_interconnect("loopback-tcp", bandwidth=1e9).bandwidth == 1e9


def test_horovod_hides_all_but_the_last_bucket_behind_the_backward_pass():
    link = interconnect.resolve_interconnect("pcie3")
    # 200 MiB of gradients in 64 MiB buckets: 4 all-reduces over 8 devices.
    slow = step_model.predict_step(0.01, 200 * MiB, 8, link, schedule="horovod", jitter=0)
    ring = 2 * 7 / 8 * 200 * MiB / 12e9 + 4 * 14 * 10e-6
    assert slow.communication == pytest.approx(ring, rel=1e-9)
    assert slow.exposed == pytest.approx(ring - 0.01 * 2 / 3, rel=1e-9)  # backward too short
    fast = step_model.predict_step(1.0, 200 * MiB, 8, link, schedule="horovod", jitter=0)
    last = 2 * 7 / 8 * 64 * MiB / 12e9 + 14 * 10e-6
    assert fast.exposed == pytest.approx(last, rel=1e-9)
    assert fast.step == pytest.approx(1.0 + 0.0025 + last, rel=1e-9)  # half a 5 ms cycle


def test_device_throughput_gives_the_compute_of_a_replicas_batch(lopsided):
    model, _ = lopsided
    result = mgpu_tf.plan(model, devices=8, device_memory="16GiB", global_batch_size=1024,
                          device_throughput=400)
    assert result.compute.seconds == pytest.approx(128 / 400)
    assert not result.compute.measured_here
    assert "compute of one device's step: 320.0 ms, given: 400 examples/s per device" \
        in str(result)
    assert result.scaling[-1].throughput == pytest.approx(
        8 * 128 / result.recommended.step_seconds)


def test_without_a_figure_the_plan_says_the_compute_was_timed_here_and_on_what(lopsided):
    model, _ = lopsided
    result = mgpu_tf.plan(model, devices=2, device_memory="1GiB", global_batch_size=16)
    assert result.compute.measured_here
    assert result.reason.endswith("scaling efficiency with the compute timed on this machine")
    assert "measured on this machine (CPU: " in str(result)
    assert "pass device_throughput= or compute_seconds=" in str(result)


def test_an_epoch_adds_its_fixed_overhead_to_its_steps(lopsided):
    model, _ = lopsided
    # No wait for the slowest device and a link with no cost: a step is the compute.
    result = mgpu_tf.plan(model, devices=4, device_memory="1GiB", global_batch_size=40,
                          compute_seconds=0.1, jitter=0, bandwidth=1e30, latency=0,
                          epoch_examples=1000, epoch_overhead=2.0)
    # 10 examples per device: 100, 50 and 25 steps of 0.1 s, plus 2 s each epoch.
    assert [(e.devices, e.steps) for e in result.epochs] == [(1, 100), (2, 50), (4, 25)]
    assert [e.seconds for e in result.epochs] == pytest.approx([12.0, 7.0, 4.5])
    assert [e.efficiency for e in result.epochs] == pytest.approx(
        [1.0, 12 / (2 * 7), 12 / (4 * 4.5)])
    assert result.scaling[-1].efficiency == 1.0  # the steps alone scale perfectly
    rows = str(result).splitlines()
    assert rows[-4].endswith("epoch  epoch eff.")
    assert rows[-1].split()[-3:] == ["4.5", "s", "67%"]
    # 1001 examples need a 26th step on 4 devices, a short one of 1 example.
    longer = mgpu_tf.plan(model, devices=4, device_memory="1GiB", global_batch_size=40,
                          compute_seconds=0.1, jitter=0, bandwidth=1e30, latency=0,
                          epoch_examples=1001)
    assert [e.steps for e in longer.epochs] == [101, 51, 26]
    assert longer.epochs[-1].seconds == pytest.approx(2.6)


@pytest.mark.parametrize("options, error, message", [
    ({"epoch_examples": 0}, ValueError, "`epoch_examples` must be the number of examples"),
    ({"epoch_examples": 100, "epoch_overhead": -1}, ValueError,
     "`epoch_overhead` must be the seconds an epoch spends outside its steps"),
    ({"epoch_overhead": 5}, ValueError, "`epoch_overhead` needs `epoch_examples`"),
    ({"device_throughput": 400, "compute_seconds": 0.3}, ValueError,
     "Pass one of `compute_seconds` (one device's step) and `device_throughput`"),
    ({"device_throughput": 0}, ValueError,
     "`device_throughput` must be positive. Received: device_throughput=0"),
    ({"device_throughput": "fast"}, TypeError, "`device_throughput` must be a number"),
    ({"schedule": "nccl"}, ValueError, "`schedule` must be one of keras, horovod"),
])
def test_speed_arguments_are_checked_before_tracing(options, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        mgpu_tf.plan(keras.Sequential([keras.Input((None, 4)), keras.layers.Dense(1)]),
                     devices=2, global_batch_size=8, **options)


def test_cli_prints_the_scaling_table_and_json_for_scripts(capsys):
    args = ["plan", "--model", "support.planner_models:lopsided", "--global_batch_size", "96",
            "--devices", "6", "--device_memory", "16GiB", "--interconnect", "pcie4",
            "--device_throughput", "1600"]
    assert cli_main(args) == 0
    text = capsys.readouterr().out
    assert "data parallel over 1 to 6 devices (keras schedule):" in text
    rows = [line.split() for line in text.splitlines()[-4:]]
    assert [r[0] for r in rows] == ["1", "2", "4", "6"] and {r[1] for r in rows} == {"16"}
    assert cli_main(args + ["--json", "--schedule", "horovod"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["recommended"]["strategy"] == "mirrored"
    assert data["compute"]["seconds"] == pytest.approx(0.01)
    assert [p["devices"] for p in data["scaling"]] == [1, 2, 4, 6]
    assert data["scaling"][0]["throughput"] == pytest.approx(1600)
    assert data["schedule"] == "horovod" and data["interconnect"]["bandwidth"] == 24e9
    assert data["epochs"] == []
    assert cli_main(args + ["--json", "--epoch_examples", "960", "--epoch_overhead", "3"]) == 0
    epochs = json.loads(capsys.readouterr().out)["epochs"]
    assert [(e["devices"], e["steps"]) for e in epochs] == [(1, 60), (2, 30), (4, 15), (6, 10)]
    assert epochs[0]["seconds"] == pytest.approx(60 * 0.01 + 3)


@pytest.mark.parametrize("extra, message", [
    (["--device_throughput", "400", "--compute_seconds", "0.3"],
     "Pass one of --device_throughput and --compute_seconds"),
    (["--compute_seconds", "-1"], "--compute_seconds must be positive. Received: "),
    (["--schedule", "ring"], "--schedule must be one of keras, horovod"),
    (["--epoch_examples", "0"], "--epoch_examples must be at least 1. Received: "),
    (["--epoch_overhead", "4"], "--epoch_overhead needs --epoch_examples"),
])
def test_cli_refuses_bad_speed_options_before_loading_the_model(extra, message, capsys):
    code = cli_main(["plan", "--model", "no_such_module:build", "--global_batch_size", "8"]
                    + extra)
    assert code == 2
    assert capsys.readouterr().err.startswith("mgpu-tf plan: " + message)
