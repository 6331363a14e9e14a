"""Importing the toolkit changes nothing: no Keras class, no logging handler, no stream.

What to change is the calls' business: `make_strategy` installs the patches a strategy
needs, `setup_logging` sets up the log.
"""

import json
import subprocess
import sys

from support import workers

# Loads every public name of every package, then compares Keras' classes, the loggers and
# file descriptor 2 with what they were before the first import of mgpu_tf.
_LOAD_EVERYTHING = """
import importlib, json, logging, os, sys
import keras

def keras_classes():
    roots = [keras.Model, keras.layers.Layer, keras.callbacks.Callback, keras.metrics.Metric,
             keras.optimizers.SGD, keras.optimizers.Adam, keras.losses.Loss]
    return {cls for root in roots for cls in root.__mro__ if cls.__module__.startswith("keras")}

def snapshot():
    return {f"{cls.__module__}.{cls.__qualname__}.{name}": repr(value)
            for cls in keras_classes() for name, value in vars(cls).items()}

def handlers():
    loggers = ["", "mgpu_tf", *logging.Logger.manager.loggerDict]
    return {name: [repr(h) for h in logging.getLogger(name).handlers] for name in loggers}

before, logged, stderr = snapshot(), handlers(), os.readlink("/proc/self/fd/2")
import mgpu_tf
loaded = []
for package in ["mgpu_tf", "mgpu_tf.base", "mgpu_tf.callbacks", "mgpu_tf.cluster",
                "mgpu_tf.comm", "mgpu_tf.data", "mgpu_tf.model_parallel", "mgpu_tf.planner",
                "mgpu_tf.strategies"]:
    module = importlib.import_module(package)
    for name in module.__all__:
        getattr(module, name)
        loaded.append(f"{package}.{name}")
import mgpu_tf.flags
after = snapshot()
print(json.dumps({
    "loaded": len(loaded),
    "changed": sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)),
    "handlers": sorted(name for name, now in handlers().items()
                       if name in logged and now != logged[name] and name != "tensorflow"),
    "stderr": os.readlink("/proc/self/fd/2") == stderr,
    "level": os.environ.get("TF_CPP_MIN_LOG_LEVEL")}))
"""


def test_importing_every_public_name_changes_no_keras_class_logger_or_stream():
    env = {k: v for k, v in workers.environment().items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-c", _LOAD_EVERYTHING], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.splitlines()[-1])
    assert found["loaded"] > 40, found  # the script reached the toolkit's names
    assert found["changed"] == [], found["changed"][:20]
    assert (found["handlers"], found["stderr"], found["level"]) == ([], True, None), found


_DECLARE_WITHOUT_TENSORFLOW = """
import json, sys
from mgpu_tf.base import registry
from mgpu_tf.strategies import options

refused = {}
for name, bad in [("compression", "int8"), ("transport", "udp"), ("steps_per_sync", 0),
                  ("shard_optimizer_state", "yes"), ("cluster", "{not json")]:
    try:
        registry.option(name).check(bad)
    except (TypeError, ValueError) as error:
        refused[name] = "TypeError" if isinstance(error, TypeError) else "ValueError"
print(json.dumps({"options": list(registry.OPTIONS), "refused": refused,
                  "tensorflow": "tensorflow" in sys.modules}))
"""


def test_every_feature_declares_its_options_without_loading_tensorflow():
    result = subprocess.run([sys.executable, "-c", _DECLARE_WITHOUT_TENSORFLOW],
                            env=workers.environment(), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.splitlines()[-1])
    assert {"devices", "cluster", "worker_hosts", "task_index", "compression",
            "steps_per_sync", "transport", "shard_optimizer_state"} <= set(found["options"])
    assert found["refused"] == {"compression": "ValueError", "transport": "ValueError",
                                "steps_per_sync": "ValueError",
                                "shard_optimizer_state": "TypeError", "cluster": "ValueError"}
    assert found["tensorflow"] is False
