"""The private names of TensorFlow's runtime the toolkit touches (collective keys, the
coordination service, the runtime's start, aborting collectives, the default strategy); as
`compat.private`'s."""

import contextlib

from mgpu_tf.compat.versions import PrivateNameError, attribute, check, missing

__all__ = ["PrivateNameError", "abort_collectives", "collective_key_base",
           "configure_coordination_service", "default_strategy", "peer_health",
           "runtime_started", "set_collective_key_base", "without_partial_batches"]


def collective_key_base(strategy_class):
    """Returns the number a MirroredStrategy class starts its collective keys at.

    `MirroredStrategy._collective_key_base` (TensorFlow 2.18-2.22), read by its `__init__`.
    """
    name = "MirroredStrategy._collective_key_base"
    received = f"strategy_class={strategy_class.__name__}"
    base = attribute(strategy_class, name, received)
    if not isinstance(base, int):
        raise missing(name, received)
    return base


def set_collective_key_base(strategy_class, base):
    """Sets where the MirroredStrategy objects built from now on start their collective keys."""
    collective_key_base(strategy_class)
    setattr(strategy_class, "_collective_key_base", int(base))


def configure_coordination_service(service_leader, jobs, timeout_ms):
    """Sets TensorFlow's coordination service for this process, unless it already has one.

    `tensorflow.python.eager.context` (TensorFlow 2.18-2.22). Must run before the runtime starts.

    Args:
        service_leader: the leader task, such as `"/job:chief/replica:0/task:0"`.
        jobs: `{job name: number of tasks}`.
        timeout_ms: the heartbeat and shutdown-barrier timeouts, in milliseconds.

    Returns:
        True when it set the service; False when the process already had one.
    """
    name = "tensorflow.python.eager.context"
    check(name)
    try:
        from tensorflow.python.eager import context as context_lib

        context = context_lib.context()
        configure = context.configure_coordination_service
        configured = context.coordination_service
        job_proto = context_lib.coordination_config_pb2.CoordinatedJob
    except (ImportError, AttributeError):
        raise missing(name, f"service_leader={service_leader!r}") from None
    if configured is not None:
        return False
    configure(
        service_type="standalone",
        service_leader=service_leader,
        heartbeat_timeout_in_ms=int(timeout_ms),
        shutdown_barrier_timeout_in_ms=int(timeout_ms),
        coordinated_jobs=[job_proto(name=job, num_tasks=count)
                          for job, count in jobs.items()],
    )
    return True


def runtime_started():
    """True once TensorFlow's eager runtime has started (after which collective ops can no
    longer be configured).

    `tensorflow.python.eager.context.Context._initialized` (TensorFlow 2.18-2.22).
    """
    name = "tensorflow.python.eager.context.Context._initialized"
    try:
        from tensorflow.python.eager import context as context_lib

        return bool(context_lib.context()._initialized)
    except (ImportError, AttributeError):
        raise missing(name, "runtime_started()") from None


def default_strategy():
    """Returns TensorFlow's default strategy, the one outside every `strategy.scope()`.

    Inside a scope it relies on each graph's own strategy stack (TensorFlow 2.18-2.22):
    `get_strategy()` in a fresh `tf.Graph` gives the default.
    """
    import tensorflow as tf

    if not tf.distribute.has_strategy():
        return tf.distribute.get_strategy()
    check("the strategy scope stack of each graph")
    with tf.Graph().as_default():
        if tf.distribute.has_strategy():
            raise missing("the strategy scope stack of each graph", "a call inside a scope")
        return tf.distribute.get_strategy()


def abort_collectives(message):
    """Fails every collective op of this process, pending or later, with `message`.

    `tensorflow.python.eager.context.Context.abort_collective_ops` (TensorFlow 2.18-2.22),
    what TensorFlow's own check of its peers' health calls.
    """
    import tensorflow as tf

    abort = _context_method("abort_collective_ops", f"message={message!r}")
    abort(tf.errors.DEADLINE_EXCEEDED, message)


def peer_health(task, timeout_seconds):
    """None when `task` (`"/job:worker/replica:0/task:1"`) answers TensorFlow's health check
    of collective peers within `timeout_seconds`, else the error's text.

    `tensorflow.python.eager.context.Context.check_collective_ops_peer_health` (TensorFlow
    2.18-2.22): a dead peer refuses, a stopped one does not answer, a restarted one is another.
    """
    import tensorflow as tf

    probe = _context_method("check_collective_ops_peer_health", f"task={task!r}")
    try:
        probe(task, int(timeout_seconds * 1000))
    except tf.errors.OpError as error:
        return f"{type(error).__name__}: {error.message}".strip()
    return None


def _context_method(method, received):
    """The bound method `method` of TensorFlow's eager context (`Context.<method>`)."""
    name = f"Context.{method}"
    check(name)
    try:
        from tensorflow.python.eager import context as context_lib

        return getattr(context_lib.context(), method)
    except (ImportError, AttributeError):
        raise missing(name, received) from None


@contextlib.contextmanager
def without_partial_batches(strategy):
    """Inside it, data sets `strategy` distributes read each step without TensorFlow's check
    of which workers still have data (an all-reduce a step): for pipelines that give every
    worker the same steps.

    `CollectiveAllReduceExtended.experimental_enable_get_next_as_optional` (TensorFlow
    2.18-2.22), read as a data set is distributed.
    """
    name = "CollectiveAllReduceExtended.experimental_enable_get_next_as_optional"
    extended = strategy.extended
    before = attribute(extended, name, f"strategy={type(strategy).__name__}")
    setattr(extended, "experimental_enable_get_next_as_optional", False)
    try:
        yield
    finally:
        setattr(extended, "experimental_enable_get_next_as_optional", before)
