"""How an adaptive data set starts: its first shares, and the one sharding policy it takes."""

import logging

from mgpu_tf.cluster import detect
from mgpu_tf.data import plan as plan_lib
from mgpu_tf.data.adaptive.shares import AdaptiveShares

__all__ = ["from_weights", "choose_policy"]

logger = logging.getLogger("mgpu_tf")


def from_weights(weights, global_batch_size, num_workers, replicas_per_worker):
    """An `AdaptiveShares` for `weights="adaptive"`; `None` for any other `weights`.

    It starts from the deployment's `MGPU_TF_SHARD_WEIGHTS` when that has one
    weight per unit, else even.
    """
    if not isinstance(weights, str):
        return None
    if weights != "adaptive":
        raise ValueError(
            "`weights` must be a list of numbers, 'adaptive' or None. Received: "
            f"weights={weights!r}. Pass weights='adaptive' to follow measured speeds.")
    units = num_workers if num_workers > 1 else replicas_per_worker
    initial = detect.shard_weights()
    if initial is not None and (len(initial) != units or not all(initial)):
        logger.warning("mgpu_tf: MGPU_TF_SHARD_WEIGHTS=%s does not give %d positive "
                       "weights; adaptive shards start even.", initial, units)
        initial = None
    return AdaptiveShares(global_batch_size, num_workers, replicas_per_worker, initial)


def choose_policy(policy, source_kind):
    """The sharding policy of an adaptive data set: `"data"`, the only one whose steps
    stay the same when the shares move (`"file"` and `"off"` fix each worker's examples)."""
    if policy in (plan_lib.ShardPolicy.AUTO, plan_lib.ShardPolicy.DATA):
        if source_kind == "function" and policy == plan_lib.ShardPolicy.AUTO:
            why = "adaptive weights: the input function is called for one pipeline"
        else:
            why = "adaptive weights move examples between workers every epoch"
        return plan_lib.ShardPolicy.DATA, ("auto: " if policy == "auto" else "") + why
    raise ValueError(
        "`weights='adaptive'` needs policy='data' (or 'auto'): the shares move examples "
        f"between workers every epoch. Received: policy={policy.value!r}. Use "
        "policy='auto', or fixed weights with this policy.")
