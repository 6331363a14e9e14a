"""The names the bad-input matrix of docs/reliability.md is written with."""

import io

import keras
import numpy as np
import tensorflow as tf
from absl import flags as absl_flags

import mgpu_tf
from mgpu_tf import flags as mgpu_flags
from mgpu_tf.cluster import detect as cluster
from mgpu_tf.cluster import kubernetes
from mgpu_tf.cluster import elastic
from mgpu_tf.cluster import launcher
from mgpu_tf.cluster import network_policy
from support import models


def flags(*argv):
    """Parses `argv` with the strategy flags on a fresh set of flags."""
    values = absl_flags.FlagValues()
    mgpu_flags.define_flags(values)
    values(["prog", *argv])


def launch(command, workers, **options):
    return launcher.launch(command, workers, output=io.StringIO(), **options)


def launch_elastic(command, workers, script, **options):
    return elastic.launch_elastic(command, workers, script, output=io.StringIO(), **options)


def examples(count):
    """A data set of `count` single examples."""
    return tf.data.Dataset.from_tensor_slices(
        (np.arange(count, dtype="float32")[:, None], np.zeros(count, "float32")))


def mirrored(count, **options):
    return mgpu_tf.make_strategy("mirrored", devices=count, **options)


def a_file():
    """The path of a file that exists (so nothing can be made under it)."""
    return __file__


def mlp(layers):
    """A built Sequential model of `layers` Dense layers."""
    return keras.Sequential([keras.Input((4,))] + [keras.layers.Dense(4)
                                                   for _ in range(layers)])


def unbuilt():
    return keras.Sequential([keras.layers.Dense(4), keras.layers.Dense(1)])


def namespace():
    """Returns the globals the matrix's calls are evaluated in."""
    return {
        "flags": flags, "launch": launch, "examples": examples, "mirrored": mirrored,
        "mlp": mlp, "unbuilt": unbuilt, "residual": models.residual,
        "with_batch_norm": models.with_batch_norm,
        "make_strategy": mgpu_tf.make_strategy, "simulate_devices": mgpu_tf.simulate_devices,
        "parse_tf_config": mgpu_tf.parse_tf_config, "detect_cluster": cluster.detect_cluster,
        "shard_dataset": mgpu_tf.shard_dataset, "ModelParallel": mgpu_tf.ModelParallel,
        "make_manifests": kubernetes.make_manifests, "launch_elastic": launch_elastic,
        "secure": network_policy.secure,
        "np": np, "prepare_model": mgpu_tf.prepare_model, "a_file": a_file,
        "BackupAndRestore": mgpu_tf.callbacks.BackupAndRestore,
    }
