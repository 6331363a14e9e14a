"""A worker waiting for peers that never start: it gives up at `timeout_seconds`, and says
whom it waits for less and less often."""

import itertools
import json
import re
import subprocess
import sys

from mgpu_tf.cluster import launcher
from mgpu_tf.cluster import waiting
from support import workers


def test_the_line_comes_after_1_s_then_5_doubling_to_once_a_minute():
    assert list(itertools.islice(waiting.line_delays(), 8)) == [1, 5, 10, 20, 40, 60, 60, 60]
    assert list(itertools.islice(waiting.line_delays(0.5, 3), 5)) == [0.5, 0.5, 1, 2, 3]
    # An hour's wait: 1 + 5 + 10 + 20 + 40 s, then a line a minute: 63 lines, not 720.
    elapsed = itertools.accumulate(waiting.line_delays())
    assert sum(1 for _ in itertools.takewhile(lambda t: t <= 3600, elapsed)) == 63


_ALONE = "import mgpu_tf; mgpu_tf.make_strategy('multi_worker', timeout_seconds=3)"


def test_a_worker_whose_peer_never_starts_gives_up_at_its_timeout_seconds():
    config = launcher.worker_tf_configs(2)[0]  # worker 1's port: nothing listens there
    env = dict(workers.environment(), TF_CONFIG=json.dumps(config))
    result = subprocess.run([sys.executable, "-c", _ALONE], env=env, capture_output=True,
                            text=True, timeout=600)
    peer = config["cluster"]["worker"][1]
    assert result.returncode == 1, result.stderr[-3000:]
    said = re.findall(r"^mgpu_tf: worker 0 waits for worker 1 \((.*?): nothing listens there "
                      r"yet\); gives up at [\d:]+ UTC \(in (\d+) s\)", result.stderr, re.M)
    # The first line after 1 s, the next after 5 more: one line in a 3 s wait.
    assert [address for address, _ in said] == [peer], result.stderr[-3000:]
    assert int(said[0][1]) <= 3, said
    assert result.stderr.rstrip().splitlines()[-1] == (
        "mgpu_tf.cluster.waiting.PeersMissingError: worker 0 waited 3 s for the other workers; "
        f"these never started: worker 1 ({peer}: nothing listens there yet). Received: "
        f"TF_CONFIG's cluster {config['cluster']!r}. Start every worker of the cluster, or "
        "give a cluster of the workers there are."), result.stderr[-3000:]
