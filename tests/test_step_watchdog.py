"""`timeout_seconds` over a multi-worker fit: no thread per collective, a live peer that
stops joining fails the step after the timeout, a busy step never does, and a fit that
failed mid-step leaves nothing for the watchdog to give up on."""

import re
import textwrap

from support import workers


def _tails(out):
    """Each worker's mgpu_tf lines and the end of its output, for a failure's message."""
    return "\n".join(
        f"--- worker {index}:\n" + "\n".join(
            line for line in text.splitlines() if "mgpu_tf" in line)[-3000:]
        + "\n...\n" + text[-3000:] for index, text in sorted(out.items()))


def test_short_steps_keep_their_threads_and_a_live_silent_peer_fails_the_step():
    code, out = workers.run_workers("-m", 2, "support.mw_watchdog", 4)
    # Exit 3 from worker 0's abort in the last fit: the failed fit before it, followed by
    # 6 s without a step, aborted nothing (the next fits trained).
    assert code == 3, _tails(out)
    for text in out.values():
        # TensorFlow's own timeout held two threads per collective for 4 s: +280 here. The
        # epochs' iterators being freed (data.release) hold theirs a moment: +25-37.
        assert "collective timeout: None" in text, text[-2000:]
        before, most = map(int, re.search(r"threads: (\d+) (\d+)", text).groups())
        assert most - before < 100, (before, most)
    aborted = re.search(r"aborted after ([\d.]+) s: DeadlineExceededError: (.*)", out[0])
    assert aborted, out[0][-3000:]
    # Not before the timeout; how late a busy machine makes the check is not asserted.
    assert float(aborted.group(1)) >= 4.0, aborted.group(0)
    waited = re.search(r"worker 0 waited (\d+\.\d) s in step 6 of epoch 1 \(timeout_seconds=4\) "
                       r"for a peer that did not join its collectives\. Every peer answers its "
                       r"health check, so it is alive but busy elsewhere", out[0])
    assert waited and float(waited.group(1)) >= 4.0, out[0][-3000:]


_ALONE = """
import time
from mgpu_tf.cluster import step_watchdog

def compute(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))

watchdog = step_watchdog.StepWatchdog(0.5, "worker 7")
watchdog.began("step 1 of epoch 1")
compute(1.5)  # a step that computes (or traces) for three timeouts
watchdog.ended()
print("busy:", watchdog.aborted)
watchdog.began("step 2 of epoch 1")
compute(1.0)  # traces a new step function, then waits for a peer that traces it too
time.sleep(1.0)
print("peer as slow plus less than the timeout:", watchdog.aborted)
time.sleep(1.5)
print("peer slower still:", watchdog.aborted)
waiting = step_watchdog.StepWatchdog(0.5, "worker 7")
waiting.began("step 1 of epoch 1")
time.sleep(1.5)  # a step that only waits
print("idle:", waiting.aborted)
"""


def test_a_step_that_computes_past_the_timeout_goes_on_and_one_that_waits_does_not(tmp_path):
    script = tmp_path / "alone.py"
    script.write_text(textwrap.dedent(_ALONE))
    result = workers.run_python(script)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "busy: None" in result.stdout, result.stdout
    # A step waits as long as it worked, plus the timeout, before it is given up.
    assert "peer as slow plus less than the timeout: None" in result.stdout, result.stdout
    for line in (r"peer slower still: worker 7 waited (\d+\.\d) s in step 2 of epoch 1 ",
                 r"idle: worker 7 waited (\d+\.\d) s in step 1 of epoch 1 "):
        waited = re.search(line + r"\(timeout_seconds=0.5\) for a peer", result.stdout)
        assert waited and float(waited.group(1)) >= 0.5, result.stdout
