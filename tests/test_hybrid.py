"""The "hybrid" strategy: a pipeline in each worker, gradients averaged across workers."""

import json
import os
import re
import subprocess
import sys

import pytest

import mgpu_tf
from support import mw_hybrid
from support import mw_hybrid_lm
from support import tolerance
from support import workers

# 8 Adam steps of mw_hybrid.build_model() on global batches of 16.
TOLERANCE = tolerance.training(mw_hybrid.EPOCHS * mw_hybrid.EXAMPLES // mw_hybrid.GLOBAL_BATCH,
                               mw_hybrid.TERMS + mw_hybrid.GLOBAL_BATCH, optimizer="adam")


@pytest.mark.multiworker
def test_two_workers_of_two_devices_train_as_one_device_through_launch():
    result = subprocess.run(
        [sys.executable, "-m", "mgpu_tf.cli", "launch", "--workers", "2", "--",
         sys.executable, "-m", "support.mw_hybrid"],
        env=workers.environment(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for task in (0, 1):
        lines = dict(re.findall(rf"^\[{task}\] ([^:\n]+): (.*)$", result.stdout, re.M))
        assert lines["kind"] == "hybrid"
        assert f"[{task}] done" in result.stdout
        assert int(lines["steps"]) == 8
        assert float(lines["moved"]) > 1e-2  # training changed the weights
        assert float(lines["relative error"]) < TOLERANCE
        own = [f"/job:worker/replica:0/task:{task}/device:CPU:{stage}" for stage in (0, 1)]
        for stage in (0, 1):
            assert lines[f"stage {stage} devices"] == own[stage]
        assert lines["slot devices"] == " ".join(own)  # Adam's moments beside their weights
    initial = re.findall(r"^\[\d\] initial: (.*)$", result.stdout, re.M)
    assert len(initial) == 2 and initial[0] == initial[1]  # broadcast from worker 0


@pytest.mark.multiworker
def test_two_workers_pipeline_a_kerashub_gpt2_and_train_as_one_device():
    pytest.importorskip("keras_hub")
    code, output = workers.run_workers("-m", 2, "support.mw_hybrid_lm")
    assert code == 0, "\n".join(output.values())[-4000:]
    steps = mw_hybrid_lm.EPOCHS * mw_hybrid_lm.EXAMPLES // mw_hybrid_lm.GLOBAL_BATCH
    bound = tolerance.training(steps, mw_hybrid_lm.TERMS + mw_hybrid_lm.GLOBAL_BATCH
                               * mw_hybrid_lm.LENGTH, optimizer="adam")
    for task in (0, 1):
        lines = dict(re.findall(r"^([^:\n]+): (.*)$", output[task], re.M))
        first, second = lines["stages"].split(" | ")
        assert "transformer_layer_0" in first and "transformer_layer_1" in second
        assert first.startswith("token_embedding") and second.endswith("token_embedding")
        assert lines["embedding device"].endswith(f"task:{task}/device:CPU:0")
        assert int(lines["steps"]) == steps
        assert float(lines["moved"]) > 100 * bound
        assert float(lines["relative error"]) < bound, (lines["relative error"], bound)


def test_shard_optimizer_state_does_not_apply_to_a_pipeline():
    with pytest.raises(ValueError, match="`shard_optimizer_state` does not apply to strategy "
                                         "'hybrid'"):
        mgpu_tf.make_strategy("hybrid", devices_per_worker=2, shard_optimizer_state=True)
    with pytest.raises(ValueError, match="`shard_optimizer_state` does not apply to strategy "
                                         "'model_parallel'"):
        mgpu_tf.make_strategy("model_parallel", shard_optimizer_state=True)


def test_more_devices_per_worker_than_present_fails_before_starting():
    with pytest.raises(ValueError, match=r"`devices_per_worker` asks for 8 devices but this "
                       r"worker has 4 .*Received: devices_per_worker=8"):
        mgpu_tf.make_strategy("hybrid", devices_per_worker=8)


def test_one_worker_is_not_a_hybrid_layout():
    with pytest.raises(ValueError, match="'hybrid' averages gradients across workers and "
                       "needs at least 2; this cluster has 1"):
        mgpu_tf.make_strategy("hybrid", devices_per_worker=2)


def test_devices_and_devices_per_worker_must_agree():
    cluster = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
               "task": {"type": "worker", "index": 0}}
    with pytest.raises(ValueError, match="`devices` and `devices_per_worker` disagree"):
        mgpu_tf.make_strategy("hybrid", devices=["CPU:0", "CPU:1"], devices_per_worker=3,
                              cluster=json.dumps(cluster))


def test_devices_per_worker_must_be_an_integer():
    with pytest.raises(TypeError, match="`devices_per_worker` must be an integer"):
        mgpu_tf.make_strategy("hybrid", devices_per_worker="2")


def test_hybrid_refuses_options_of_other_strategies():
    with pytest.raises(ValueError, match="`compression` does not apply to strategy 'hybrid'"):
        mgpu_tf.make_strategy("hybrid", devices_per_worker=2, compression="float16")


@pytest.fixture(scope="module")
def hybrid_callbacks_run(tmp_path_factory):
    """Two hybrid workers training with TensorBoard, ModelCheckpoint and validation data."""
    directory = tmp_path_factory.mktemp("hybrid_callbacks")
    code, output = workers.run_workers("-m", 2, "support.mw_hybrid_callbacks", directory)
    # Exit 3 from worker 0 when its peer stops joining, in the script's last fit.
    assert code == 3, "\n".join(output.values())[-4000:]
    lines = {task: dict(re.findall(r"^([^:\n]+): (.*)$", text, re.M))
             for task, text in output.items()}
    return directory, lines


@pytest.mark.multiworker
def test_hybrid_writers_write_once_from_the_chief(hybrid_callbacks_run):
    directory, lines = hybrid_callbacks_run
    assert [lines[task]["is_chief"] for task in (0, 1)] == ["True", "False"]
    for split in ("train", "validation"):
        events = [name for name in os.listdir(directory / "tb" / split)
                  if name.startswith("events.out.tfevents")]
        assert len(events) == 1, events
    assert sorted(os.listdir(directory)) == ["best.weights.h5", "tb"]


@pytest.mark.multiworker
def test_a_hybrid_fit_refuses_keras_writers_and_fails_a_step_a_live_peer_never_joins(
        hybrid_callbacks_run):
    # A hybrid fit runs the multi-worker fit's callbacks: Keras' ModelCheckpoint is refused
    # (nothing written: the directory holds only the toolkit's files, above), and with
    # timeout_seconds=6 a step waiting for a live peer fails.
    _, lines = hybrid_callbacks_run
    for task in (0, 1):
        assert "Use mgpu_tf.callbacks.ModelCheckpoint" in lines[task]["keras ModelCheckpoint"]
    assert "Keras' ModelCheckpoint cannot run in a multi-worker fit" in \
        lines[0]["keras ModelCheckpoint"]
    aborted = [(float(key.split()[2]), value) for key, value in lines[0].items()
               if key.startswith("aborted after")]
    assert len(aborted) == 1, lines[0]
    seconds, message = aborted[0]
    assert seconds >= 6.0, seconds  # not before the timeout
    assert message.startswith("DeadlineExceededError"), message
    assert re.search(r"worker 0 waited \d+\.\d s in step \d+ of epoch 1 \(timeout_seconds=6\) "
                     r"for a peer that did not join its collectives\. Every peer answers", message)


@pytest.mark.multiworker
def test_hybrid_validation_metrics_are_the_global_batch_ones_on_every_worker(
        hybrid_callbacks_run):
    _, lines = hybrid_callbacks_run
    for key in ("val_loss", "val_mae", "evaluate"):
        assert lines[0][key] == lines[1][key], key
    evaluated = [float(v) for v in lines[0]["evaluate"].split()]
    reference = [float(v) for v in lines[0]["reference"].split()]
    assert evaluated == pytest.approx(reference, rel=1e-5)
    assert float(lines[0]["val_loss"].split()[-1]) == pytest.approx(reference[0], rel=1e-5)
