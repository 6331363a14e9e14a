"""clipnorm, global_clipnorm and clipvalue under a strategy clip the global gradient.

The reference is the same model trained on one device (no strategy) on the same global
batches, clipping each step's whole gradient as Keras does. Every run clips on every step
(`test_every_step_clips`), so a clip of each replica's share instead of the sum shows as a
difference far above the tolerance (with two replicas, about as large as the weights moved).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import mgpu_tf
from mgpu_tf.comm import optimizer_step
from support import compare
from support import mw_clipping
from support import tolerance
from support import workers

CLIPS = list(mw_clipping.CLIPS)
WEIGHTS = sum(int(np.prod(w.shape)) for w in mw_clipping.data()[2])
# Besides the model's sums, a clip's norm sums the squares of up to all the weights.
TOLERANCE = tolerance.training(mw_clipping.STEPS,
                               mw_clipping.TERMS + mw_clipping.GLOBAL_BATCH + WEIGHTS)
# float16 keeps 11 bits: each replica's gradient is rounded to it once and their sum once
# more, so the summed gradient is off by up to 3 roundings (2 ** -11 each) of its size and
# the clip's norm of it by as much. Each clipped update, and so the weights' whole way, is
# then off by at most twice that share, twice over for what later gradients feed back.
FLOAT16_ROUNDINGS = 2 * 2 * 3 * 2.0 ** -11

needs_sharding = pytest.mark.skipif(
    tuple(int(part) for part in keras.__version__.split(".")[:2]) < (3, 10),
    reason=f"shard_optimizer_state needs Keras 3.10 or later; Keras {keras.__version__} refuses it")


@pytest.fixture(scope="module")
def references():
    """`{clip: one device's weights}`, and `None: the weights without clipping`."""
    return {clip: mw_clipping.train(None, clip) for clip in [*CLIPS, None]}


def _mirrored(devices=2, **options):
    return mgpu_tf.make_strategy("mirrored", devices=devices, **options)


def _check(trained, references, clip, bound=TOLERANCE):
    difference = compare.relative_difference(trained, references[clip])
    assert difference < bound, f"{clip}: {difference:.3e} from one device, bound {bound:.3e}"


# ------------------------------------------------------------------ the reference clips


@pytest.mark.parametrize("clip", CLIPS)
def test_every_step_clips(references, clip):
    """One device step by step: each step's gradient is over the threshold, and the clip
    moves the weights far from where the unclipped run goes."""
    x, y, weights = mw_clipping.data()
    model = mw_clipping.build_model(weights)
    threshold = mw_clipping.CLIPS[clip]
    batch = mw_clipping.GLOBAL_BATCH
    for step in range(mw_clipping.STEPS):
        xs, ys = x[step * batch:(step + 1) * batch], y[step * batch:(step + 1) * batch]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xs) - ys))
        grads = [g.numpy() for g in tape.gradient(loss, model.trainable_weights)]
        if clip == "clipnorm":
            assert min(np.linalg.norm(g) for g in grads) > threshold, step
            grads = [g * threshold / np.linalg.norm(g) for g in grads]
        elif clip == "global_clipnorm":
            norm = np.sqrt(sum(np.sum(g ** 2) for g in grads))
            assert norm > threshold, step
            grads = [g * threshold / norm for g in grads]
        else:
            assert all(np.abs(g).max() > threshold for g in grads), step
            grads = [np.clip(g, -threshold, threshold) for g in grads]
        for variable, g in zip(model.trainable_weights, grads):
            variable.assign(variable - mw_clipping.LEARNING_RATE * g)
    _check(model.get_weights(), references, clip)
    assert compare.relative_difference(references[None], references[clip]) > 1e3 * TOLERANCE


# ------------------------------------------------------------------ one machine


@pytest.mark.parametrize("clip", CLIPS)
def test_mirrored_clips_the_summed_gradient(references, clip):
    _check(mw_clipping.train(_mirrored(), clip), references, clip)


@needs_sharding
@pytest.mark.parametrize("clip", CLIPS)
def test_sharded_state_clips_over_all_slices(references, clip):
    # Four slices of 61 numbers: the kernels span two and three of them.
    _check(mw_clipping.train(_mirrored(4, shard_optimizer_state=True), clip), references, clip)


def _synced_reference(clip):
    """One device's weights and bound for two steps per sync: a step on both global batches
    together."""
    batch = 2 * mw_clipping.GLOBAL_BATCH
    expected = mw_clipping.train(None, clip, global_batch=batch)
    unclipped = mw_clipping.train(None, None, global_batch=batch)
    bound = tolerance.training(mw_clipping.STEPS // 2, mw_clipping.TERMS + batch + WEIGHTS)
    assert compare.relative_difference(unclipped, expected) > 1e3 * bound
    return {clip: expected}, bound


@pytest.mark.parametrize("clip", CLIPS)
def test_steps_per_sync_clips_the_synced_sum(clip):
    expected, bound = _synced_reference(clip)
    _check(mw_clipping.train(_mirrored(steps_per_sync=2), clip), expected, clip, bound)


@needs_sharding
def test_steps_per_sync_with_sharded_state_clips_the_synced_sum():
    expected, bound = _synced_reference("clipnorm")
    strategy = _mirrored(4, steps_per_sync=2, shard_optimizer_state=True)
    _check(mw_clipping.train(strategy, "clipnorm"), expected, "clipnorm", bound)


def _float16_bound(references, clip):
    moved = compare.relative_difference(mw_clipping.data()[2], references[clip])
    return TOLERANCE + FLOAT16_ROUNDINGS * moved


@pytest.mark.parametrize("clip", ["clipnorm", "global_clipnorm"])
def test_compressed_sum_is_clipped(references, clip):
    trained = mw_clipping.train(_mirrored(compression="float16"), clip)
    _check(trained, references, clip, _float16_bound(references, clip))


@needs_sharding
def test_compressed_sum_of_sharded_state_is_clipped(references):
    # With compression on one machine the slices come from the clipped whole sum.
    strategy = _mirrored(compression="float16", shard_optimizer_state=True)
    trained = mw_clipping.train(strategy, "global_clipnorm")
    _check(trained, references, "global_clipnorm", _float16_bound(references, "global_clipnorm"))


def test_loss_scale_optimizer_clips_the_summed_gradient():
    # Both runs compute in float16; the bound is that of float16 sums of the replicas' halves.
    expected = mw_clipping.train(None, "global_clipnorm", mixed=True)
    trained = mw_clipping.train(_mirrored(), "global_clipnorm", mixed=True)
    _check(trained, {"global_clipnorm": expected}, "global_clipnorm",
           _float16_bound({"global_clipnorm": expected}, "global_clipnorm"))


@pytest.mark.parametrize("clip", ["clipnorm", "global_clipnorm"])
def test_model_parallel_has_one_replica_and_clips_as_one_device(references, clip):
    strategy = mgpu_tf.make_strategy("model_parallel", devices=2)
    x, y, weights = mw_clipping.data()
    with strategy.scope():
        model = mgpu_tf.prepare_model(mw_clipping.build_model(weights, clip), strategy)
        model.compile(optimizer=keras.optimizers.SGD(
            mw_clipping.LEARNING_RATE, **{clip: mw_clipping.CLIPS[clip]}), loss="mse")
    model.fit(x, y, batch_size=mw_clipping.GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    _check(model.get_weights(), references, clip)


def test_an_optimizer_that_does_not_clip_keeps_keras_code():
    strategy = _mirrored()
    with strategy.scope():
        model = mw_clipping.build_model(mw_clipping.data()[2])
    assert optimizer_step.find(model.optimizer) is None


# ------------------------------------------------------------------ two workers


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """Each worker's `{cell: weights}` after training every cell of `WORKER_CELLS`."""
    directory = tmp_path_factory.mktemp("clipping")
    code, outputs = workers.run_workers("-m", 2, "support.mw_clipping", directory)
    assert code == 0, f"A worker failed (exit {code}):\n{outputs.get(0, '')[-3000:]}"
    trained = {}
    for index in (0, 1):
        with np.load(directory / f"worker{index}.npz") as saved:
            for name, _, _ in mw_clipping.WORKER_CELLS:
                count = sum(key.startswith(name + "/") for key in saved.files)
                trained[index, name] = [saved[f"{name}/{i}"] for i in range(count)]
    return trained


@pytest.mark.multiworker
@pytest.mark.parametrize("name, clip", [(name, clip) for name, clip, options
                                        in mw_clipping.WORKER_CELLS])
def test_two_workers_clip_the_summed_gradient(two_workers, references, name, clip):
    if "sharded" in name and tuple(int(p) for p in keras.__version__.split(".")[:2]) < (3, 10):
        pytest.skip("shard_optimizer_state needs Keras 3.10 or later")
    for index in (0, 1):
        _check(two_workers[index, name], references, clip)


@pytest.mark.multiworker
def test_hybrid_clips_the_averaged_gradient(references, tmp_path):
    # Its workers average the gradients before the optimizer, which then clips them whole.
    code, outputs = workers.run_workers("-m", 2, "support.mw_clipping", tmp_path, "hybrid")
    assert code == 0, f"A worker failed (exit {code}):\n{outputs.get(0, '')[-3000:]}"
    for index in (0, 1):
        trained = compare.saved_weights(tmp_path / f"hybrid{index}.npz")
        _check(trained, references, mw_clipping.HYBRID_CLIP)


def test_a_custom_loop_clips_the_sum_once_its_kind_prepares_the_optimizer(references):
    # No compile readies it there: the loop asks the strategy's kind, as compile would.
    strategy = _mirrored()
    x, y, weights = mw_clipping.data()
    with strategy.scope():
        model = mw_clipping.build_model(weights)
        optimizer = keras.optimizers.SGD(mw_clipping.LEARNING_RATE,
                                           global_clipnorm=mw_clipping.CLIPS["global_clipnorm"])
    assert mgpu_tf.kind_of(strategy).prepare_optimizer(optimizer) is optimizer

    def replica_step(xs, ys):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(
                tf.reduce_mean(tf.square(model(xs) - ys), axis=-1),
                global_batch_size=mw_clipping.GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    @tf.function
    def step(batch):
        strategy.run(replica_step, args=batch)

    batches = mw_clipping.global_batches(x, y, mw_clipping.GLOBAL_BATCH)
    for batch in strategy.experimental_distribute_dataset(batches):
        step(batch)
    _check(model.get_weights(), references, "global_clipnorm")
