"""`timeout_seconds` over a multi-worker fit: no thread per collective, a live peer that
stops joining fails the step after the timeout, a busy step never does, and a fit that
failed mid-step leaves nothing for the watchdog to give up on."""

import re
import textwrap

from support import workers


def test_short_steps_keep_their_threads_and_a_live_silent_peer_fails_the_step():
    code, out = workers.run_workers("-m", 2, "support.mw_watchdog", 4)
    # Exit 3 from worker 0's abort in the last fit: the failed fit before it, followed by
    # 6 s without a step, aborted nothing (the next fits trained).
    assert code == 3, out
    for text in out.values():
        # TensorFlow's own timeout held two threads per collective for 4 s: +280 here.
        assert "collective timeout: None" in text, text[-2000:]
        before, most = map(int, re.search(r"threads: (\d+) (\d+)", text).groups())
        assert most - before < 40, (before, most)
    aborted = re.search(r"aborted after ([\d.]+) s: DeadlineExceededError: (.*)", out[0])
    assert aborted, out[0][-3000:]
    assert 4.0 <= float(aborted.group(1)) < 7.0, aborted.group(0)
    assert "worker 0 waited 4.0 s in step 6 of epoch 1 (timeout_seconds=4) for a peer that " \
           "did not join its collectives. Every peer answers its health check, so it is alive " \
           "but busy elsewhere" in out[0], out[0][-3000:]


_ALONE = """
import time
from mgpu_tf.cluster import step_watchdog

watchdog = step_watchdog.StepWatchdog(0.5, "worker 7")
watchdog.began("step 1 of epoch 1")
end = time.monotonic() + 1.5
while time.monotonic() < end:  # a step that computes (or traces) for three timeouts
    sum(range(1000))
watchdog.ended()
print("busy:", watchdog.aborted)
watchdog.began("step 2 of epoch 1")
time.sleep(1.5)  # a step that waits
print("idle:", watchdog.aborted)
"""


def test_a_step_that_computes_past_the_timeout_goes_on_and_one_that_waits_does_not(tmp_path):
    script = tmp_path / "alone.py"
    script.write_text(textwrap.dedent(_ALONE))
    result = workers.run_python(script)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "busy: None" in result.stdout, result.stdout
    assert re.search(r"idle: worker 7 waited 0\.[5-9]\d* s in step 2 of epoch 1 "
                     r"\(timeout_seconds=0.5\) for a peer",
                     result.stdout), result.stdout
