"""Runs a benchmark script's `--worker` mode as a local group of workers and returns the
figures its worker 0 prints on a line `figures: {json}`."""

import io
import json
import os
import sys

from mgpu_tf.cluster import launcher


def run(script, payload, workers):
    """The figures of one run of `script --worker <payload as JSON>` on `workers` workers."""
    out = io.StringIO()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    code = launcher.launch([sys.executable, script, "--worker", json.dumps(payload)],
                           workers, env=env, output=out)
    for line in out.getvalue().splitlines():
        if "figures: " in line:
            return json.loads(line.split("figures: ", 1)[1])
    raise RuntimeError(f"the workers failed (exit {code}):\n{out.getvalue()[-3000:]}")
