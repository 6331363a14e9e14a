"""`mgpu-tf env`: print versions, devices, the strategy 'auto' would choose, and the cluster.

Print what a bug report needs: the versions of Python, TensorFlow, Keras (and the
distribution it comes from, with a warning when two install it) and mgpu_tf, the devices
TensorFlow sees, the strategy 'auto' would choose and why, the cluster
found in the environment, and the patches mgpu_tf makes to this Keras. Example: mgpu-tf env
"""

import platform
import sys

from mgpu_tf.cli import parsing
from mgpu_tf.compat import native_logs

__all__ = ["add_parser", "env_command", "environment_report", "keras_rows"]


def add_parser(subparsers):
    parser = parsing.add_command(subparsers, env_command, __doc__)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also show TensorFlow's own log lines (its C++ start-up lines, "
                             "such as why no GPU was found)")
    return parser


def environment_report():
    """Returns `[(name, value), ...]` describing this machine for a bug report."""
    import keras
    import numpy as np
    import tensorflow as tf

    from mgpu_tf.base import version
    from mgpu_tf.cluster import detect as cluster
    from mgpu_tf.cluster import tf_config
    from mgpu_tf.compat import releases
    from mgpu_tf.strategies import factory as strategies

    rows = [
        ("mgpu_tf", version.__version__),
        ("python", f"{platform.python_version()} ({sys.platform}, {platform.machine()})"),
        ("tensorflow", f"{tf.__version__} (cuda build: {tf.test.is_built_with_cuda()})"),
        *keras_rows(keras.__version__, keras.backend.backend()),
        ("release pair", releases.status_text(tf.__version__, keras.__version__)),
        ("numpy", np.__version__),
    ]
    for kind in ("CPU", "GPU", "TPU"):
        physical = [d.name for d in tf.config.list_physical_devices(kind)]
        rows.append((f"physical {kind}", ", ".join(physical) or "none"))
    try:
        kind, reason = strategies.auto_choice()
        rows.append(("auto strategy", f"{kind} ({reason})"))
    except ValueError as error:
        rows.append(("auto strategy", f"error: {error}"))
    try:
        config = cluster.detect_cluster()
        if config is None:
            rows.append(("cluster", f"none ({cluster.detect_source()})"))
        else:
            rows.append(("cluster", f"valid, from {config.source}: {config.to_json()} "
                         f"(chief: {config.is_chief})"))
    except tf_config.ClusterConfigError as error:
        rows.append(("cluster", f"INVALID: {error}"))
    for kind in ("CPU", "GPU"):
        logical = [d.name for d in tf.config.list_logical_devices(kind)]
        rows.append((f"logical {kind}", ", ".join(logical) or "none"))
    return rows + _patch_rows()


def keras_rows(version, backend):
    """The `keras` row (the version in use, its distribution and backend) and, when more than
    one distribution installs the `keras` package, a `WARNING` row naming them."""
    from mgpu_tf.compat import releases

    owners = releases.owners("keras")
    in_use = [name for name, owned in owners if owned == version]
    source = f" from {in_use[0]}" if in_use else ""
    rows = [("keras", f"{version}{source} (backend: {backend})")]
    if len(owners) > 1:
        listed = " and ".join(f"{name} {owned}" for name, owned in owners)
        rows.append(("keras package", (
            f"WARNING: {listed} both install the `keras` package, so the one installed last "
            f"runs ({version}). Keep the one your TensorFlow requires: pip uninstall "
            f"{' '.join(name for name, _ in owners)}, then pip install it.")))
    return rows


def _patch_rows():
    """One row per Keras patch: installed here as training would, or skipped (logged why)."""
    from mgpu_tf.compat import patches

    installed = patches.install()
    return [(f"patch {name}", f"{'installed' if name in installed else 'skipped'}: {what}")
            for name, what, _, _ in patches.PATCHES]


def env_command(args):
    native_logs.setup_logging(verbose=args.verbose)
    rows = environment_report()
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 1 if any(str(v).startswith("INVALID") for _, v in rows) else 0
