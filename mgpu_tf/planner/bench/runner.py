"""One function call in a fresh Python process, with its result back as JSON.

Design: docs/design.md#fresh-process-runner
"""

import importlib
import importlib.util
import json
import os
import subprocess
import sys

__all__ = ["FreshProcessError", "run_in_fresh_process"]

# Marks the result line among whatever else the child prints.
_MARK = "mgpu_tf.bench.result "
# What every child gets: quiet TensorFlow on the CPU, Keras on TensorFlow.
_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "", "KERAS_BACKEND": "tensorflow"}
_TAIL = 3000
_GRACE_SECONDS = 10


class FreshProcessError(RuntimeError):
    """A function run in a fresh process failed, gave no result or ran out of time."""


def _target(function):
    """`module:name`, or `path/to/script.py:name` for a script run as `__main__`."""
    name = getattr(function, "__qualname__", "")
    if not callable(function) or not name or "<" in name or "." in name:
        raise TypeError(
            "`function` must be a module-level function, so that a fresh process can import "
            f"it. Received: function={function!r}. Define it at the top level of a module "
            "or script.")
    module = function.__module__
    if module == "__main__":
        return f"{os.path.abspath(sys.modules['__main__'].__file__)}:{name}"
    return f"{module}:{name}"


def _environment(env, threads, gpus):
    merged = dict(os.environ, **{k: v for k, v in _ENV.items()
                                 if not (gpus and k == "CUDA_VISIBLE_DEVICES")})
    merged.pop("TF_CONFIG", None)  # the launcher gives each worker its own
    if threads is not None:
        merged.update({name: str(threads) for name in (
            "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")})
    merged.update(env or {})
    return merged


def run_in_fresh_process(function, payload=None, *, workers=1, threads=None, env=None,
                         gpus=False, timeout=600, label=None):
    """Calls `function(payload)` in a fresh Python process; returns its JSON result.

    Args:
        function: a module-level function of one argument returning JSON-serialisable
            data (of a `__main__` script: loaded from its file, its main part not run).
        payload: the JSON-serialisable argument. Defaults to `None`.
        workers: processes, above 1 local workers of one TF_CONFIG cluster; worker 0's
            result counts. Defaults to `1`.
        threads: TensorFlow (and OpenMP) threads per process. Defaults to TensorFlow's.
        env: variables set on top of this process' own (without `TF_CONFIG`), quiet and,
            unless `gpus`, on the CPU only. Defaults to `None`.
        gpus: keep the GPUs this process sees. Defaults to `False`.
        timeout: seconds before the processes are stopped. Defaults to `600`.
        label: what the run is, for errors. Defaults to the function's name.

    Raises:
        TypeError: for a function a fresh process cannot import.
        ValueError: for fewer than 1 worker.
        FreshProcessError: when the process fails, prints no result or runs out of time.
    """
    target = _target(function)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"`workers` must be an integer of at least 1. Received: "
                         f"workers={workers!r}")
    label = label or function.__qualname__
    command = [sys.executable, "-m", __name__, target, json.dumps(payload),
               json.dumps(sys.path)]
    if workers > 1:
        # The launcher stops its workers when it gets SIGTERM, as on a timeout below.
        command = [sys.executable, "-m", "mgpu_tf.cli", "launch", f"--workers={workers}",
                   f"--grace_seconds={_GRACE_SECONDS // 2}", "--", *command]
    environment = _environment(env, threads, gpus)
    process = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            out, err = process.communicate(timeout=_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        raise FreshProcessError(
            f"{label} must finish within timeout={timeout} s. Received: still running "
            f"after {timeout} s; its output ended with:\n{_tail(out, err)}\n"
            "Pass a larger `timeout`, or less work.") from None
    lines = out.splitlines()
    if workers > 1:  # the launcher prefixes each worker's lines with "[index] "
        lines = [line[4:] for line in lines if line.startswith("[0] ")]
    results = [line[len(_MARK):] for line in lines if line.startswith(_MARK)]
    if process.returncode or not results:
        raise FreshProcessError(
            f"{label} must exit with 0 and print its result in a fresh process. Received: "
            f"exit code {process.returncode}"
            f"{'' if results else ', no result'}; its output ended with:\n{_tail(out, err)}")
    return json.loads(results[-1])


def _tail(out, err):
    # A single child's errors are on stderr; the launcher merges each worker's onto stdout.
    return (err.strip() or out.strip())[-_TAIL:] or "(nothing)"


def _load(target):
    where, name = target.rsplit(":", 1)
    if where.endswith(".py"):
        sys.path.insert(0, os.path.dirname(where))  # as when the script itself runs
        module_name = os.path.splitext(os.path.basename(where))[0]
        spec = importlib.util.spec_from_file_location(module_name, where)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def _child_main(target, payload, path):
    # The parent's import path, so that whatever it imported the function from is found.
    sys.path[:0] = [entry for entry in json.loads(path) if entry not in sys.path]
    result = _load(target)(json.loads(payload))
    print(_MARK + json.dumps(result), flush=True)


if __name__ == "__main__":
    _child_main(*sys.argv[1:4])
