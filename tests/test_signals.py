"""SIGTERM and Ctrl-C end a multi-worker process promptly, a worker waiting for its peers
says whom it waits for, and Keras' own writing callbacks work under several workers.

Real worker processes on 127.0.0.1, real signals.
"""

import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from mgpu_tf.cluster import launcher
from support import workers

_TESTS = os.path.dirname(os.path.abspath(__file__))


def _start(configs, *args, env=None):
    env = workers.environment(env)
    env["PYTHONPATH"] = os.pathsep.join([_TESTS, env.get("PYTHONPATH", "")])
    return [subprocess.Popen([sys.executable, *args], cwd=_TESTS, stderr=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, text=True,
                             env=dict(env, TF_CONFIG=json.dumps(config)))
            for config in configs]


def _lines(path):
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_keras_writing_callbacks_are_refused_and_the_toolkits_write_from_the_chief(tmp_path):
    code, out = workers.run_workers("-m", 2, "support.mw_signals", "callbacks", tmp_path)
    assert code == 0, out
    final = np.load(tmp_path / "final.npz")
    final = [final[f"arr_{i}"] for i in range(len(final.files))]
    toolkit = keras.models.load_model(tmp_path / "toolkit.keras").get_weights()
    for a, b in zip(toolkit, final, strict=True):
        np.testing.assert_array_equal(a, b)
    events = [name for _, _, names in os.walk(tmp_path / "logs") for name in names]
    assert len(events) == 1, events  # the chief's log only
    for text in out.values():
        for name in ("ModelCheckpoint", "TensorBoard", "BackupAndRestore"):
            assert f"refused: Keras' {name} cannot run in a multi-worker fit" in text, text
            assert f"Use mgpu_tf.callbacks.{name} with the same arguments" in text, text
    for written in ("keras.keras", "klogs", "kbackup"):
        assert not (tmp_path / written).exists(), written


# The logs, and the vote in them, take TensorFlow's collectives, the tcp ring (with a job
# secret, transport 'auto' picks it) and the hybrid's gradient all-reduce.
@pytest.mark.parametrize("kind, signalled, secret", [("multi_worker", (1,), ""),
                                                     ("multi_worker", (0, 1), "a-job-secret-for-the-ring"),
                                                     ("hybrid", (1,), "")],
                         ids=["worker_1_only", "both_over_the_ring", "hybrid_worker_1_only"])
def test_sigterm_stops_every_worker_at_one_step_with_the_chiefs_backup(tmp_path, kind,
                                                                      signalled, secret):
    processes = _start(launcher.worker_tf_configs(2), "-m", "support.mw_signals", "stop",
                       str(tmp_path), kind, env={"MGPU_TF_JOB_SECRET": secret})
    try:
        deadline = time.monotonic() + 300
        while min(_lines(tmp_path / f"steps-{i}") for i in range(2)) < 5:
            assert time.monotonic() < deadline and all(p.poll() is None for p in processes), \
                [p.stderr.read()[-3000:] for p in processes if p.poll() is not None]
            time.sleep(0.1)
        for i in signalled:  # one after the other, as a pod's workers are stopped
            processes[i].send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=30) for p in processes]  # TensorFlow alone trains on
        errors = [p.stderr.read() for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    # Ended by the signal, not SIGKILL: the one not signalled too, as its group stopped.
    assert codes == [-signal.SIGTERM] * 2, errors
    for text in errors:  # TensorFlow's handler, displaced, is called from ours
        assert f"displaced: [{int(signal.SIGTERM)}]" in text, text[-2000:]
        assert kind == "hybrid" or f"transport 'auto' chose '{'tcp' if secret else 'tensorflow'}'" \
            in text, text[-2000:]
    # Both stop after the same step, which each counted in its own file.
    steps = [_lines(tmp_path / f"steps-{i}") for i in range(2)]
    assert steps[0] == steps[1], (steps, errors)
    where = f"after step {(steps[0] - 1) % 4 + 1} of epoch {(steps[0] - 1) // 4 + 1}"
    for i, text in enumerate(errors):
        # A worker signalled after its peer may have learnt of the stop first.
        why = {signalled[0]: ["SIGTERM"]}.get(i, ["SIGTERM", "a peer's signal"] if i in
                                              signalled else ["a peer's signal"])
        assert any(f"mgpu_tf: worker {i} stopped on {w} {where}" in text for w in why), \
            (where, text[-2000:])
    assert "backup written" in errors[0], errors[0][-2000:]  # the chief backs up that step
    metadata = json.loads((tmp_path / "backup" / "training_metadata.json").read_text())
    assert metadata["epoch"] * 4 + metadata["steps_done"] == steps[0], (metadata, steps)
    assert (tmp_path / "backup" / metadata["weights"]).exists()


def test_a_lone_worker_says_whom_it_waits_for_and_ends_on_sigterm_or_ctrl_c():
    configs = launcher.worker_tf_configs(2)
    alone = [configs[0], dict(configs[0])]  # two lone worker 0s of separate clusters
    alone[1] = launcher.worker_tf_configs(2)[0]
    processes = _start(alone, "-m", "mgpu_tf.train", "--strategy=multi_worker")
    try:
        lines = [[], []]
        for p, seen in zip(processes, lines):
            for line in p.stderr:
                seen.append(line)
                if "waits for worker 1" in line:
                    break
        for p, signum in zip(processes, (signal.SIGTERM, signal.SIGINT)):
            p.send_signal(signum)
        codes = [p.wait(timeout=30) for p in processes]
        rest = [p.stderr.read() for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    for config, seen, code, more, signum in zip(alone, lines, codes, rest,
                                                (signal.SIGTERM, signal.SIGINT)):
        peer = config["cluster"]["worker"][1]
        assert f"waits for worker 1 ({peer}: nothing listens there yet); gives up at" in \
            seen[-1], seen[-5:]
        assert code == 128 + signum, more[-2000:]
        assert f"mgpu_tf: worker 0 stopped on {signum.name} while waiting for worker 1 " \
            f"({peer}" in more, more[-2000:]


def test_keras_writing_callbacks_are_refused_naming_the_toolkits(tmp_path):
    from mgpu_tf import callbacks
    from mgpu_tf.cluster import fit_callbacks

    for made in (lambda: keras.callbacks.ModelCheckpoint(str(tmp_path / "m.keras")),
                 lambda: keras.callbacks.TensorBoard(str(tmp_path / "logs")),
                 lambda: keras.callbacks.BackupAndRestore(str(tmp_path / "b"))):
        callback = made()
        name = type(callback).__name__
        with pytest.raises(ValueError, match=rf"^Keras' {name} cannot run in a multi-worker "
                                             rf"fit: .* Use mgpu_tf\.callbacks\.{name} "):
            fit_callbacks.fit_callbacks([keras.callbacks.EarlyStopping(), callback])
    ours = [callbacks.ModelCheckpoint(str(tmp_path / "m.keras")),
            callbacks.TensorBoard(str(tmp_path / "logs")), keras.callbacks.EarlyStopping()]
    # The toolkit's pass as given (a stop on SIGTERM is added only after a multi-worker one).
    assert fit_callbacks.fit_callbacks(ours)[:len(ours)] == ours
