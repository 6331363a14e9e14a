"""The planner and shard_optimizer_state: sliced slots counted, recommended before model
parallelism.

The reference is arithmetic on the model's own weights: Adam's two slots and the slice of
weights each replica keeps, over the replicas.
"""

import mgpu_tf
from mgpu_tf.cli import main as cli_main
from mgpu_tf.planner import memory
from support import planner_models


def _plan(**kwargs):
    # With Adam, the lopsided model needs ~32.6 MiB whole: more than 31 MiB.
    return mgpu_tf.plan(planner_models.lopsided(), device_memory="31MiB", global_batch_size=64,
                        measure_compute=False, **kwargs)


def test_sharded_slots_are_counted_per_replica():
    result = _plan(devices=4)
    data, sharded = (next(o for o in result.options if o.name == name)
                     for name in ("data", "sharded"))
    whole, cut = data.footprints[0], sharded.footprints[0]
    trainable = whole.gradients
    assert whole.optimizer == 2 * trainable
    assert cut.optimizer == 3 * -(-trainable // 4)  # two slots and the weights, a quarter each
    assert (cut.params, cut.gradients, cut.activations) == (whole.params, whole.gradients,
                                                            whole.activations)


def test_sharding_is_recommended_before_model_parallelism_with_the_reason():
    result = _plan(devices=4)
    best = result.recommended
    assert (best.name, best.strategy, best.fits) == ("sharded", "mirrored", True)
    assert best.options == {"devices": 4, "shard_optimizer_state": True}
    assert not next(o for o in result.options if o.name == "data").fits
    assert [o.name for o in result.options] == ["sharded", "model", "data"]
    assert result.reason.startswith(
        "data parallel with the optimizer state sharded (mirrored over 4 devices, "
        "shard_optimizer_state=True): replicated, the training state needs")


def test_an_optimizer_that_cannot_be_sharded_is_not_offered_it():
    assert not memory.shardable("lamb") and memory.shardable("adamw")
    assert "sharded" not in [o.name for o in _plan(devices=4, optimizer="lamb").options]


def test_a_model_that_fits_replicated_is_not_offered_sharding():
    result = mgpu_tf.plan(planner_models.lopsided(), devices=4, device_memory="1GiB",
                          global_batch_size=64, measure_compute=False)
    assert [o.name for o in result.options] == ["data", "model"]


def test_auto_builds_mirrored_with_sharded_state():
    strategy = mgpu_tf.make_strategy("auto", model=planner_models.lopsided(),
                                     device_memory="31MiB")
    assert mgpu_tf.strategy_kind(strategy) == "mirrored"
    assert mgpu_tf.kind_of(strategy).settings.shard_optimizer_state is True


def test_cli_prints_the_sharded_recommendation(capsys):
    code = cli_main(["plan", "--model", "support.planner_models:lopsided",
                     "--global_batch_size", "64", "--devices", "8", "--device_memory", "31MiB",
                     "--no_measure"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("recommended: data parallel with the optimizer state sharded")
    assert "sharded" in out.split("rank")[1]
