"""The release matrix: the tests that reach Keras' and TensorFlow's private names, on each pair.

One session per TensorFlow + Keras pair of `mgpu_tf/compat/releases.py` (`nox -l` lists them),
one on the nightly builds, and `matrix_table`, which writes docs/compatibility.md's table
from the sessions' results. `.ci/run` runs the pairs marked `ci` and the nightly.

    pip install nox && nox -s tf2.18-keras3.8          # SUBSET, as CI runs it
    nox -s tf2.21-keras3.15 -- full                     # FULL, before a release

Each session installs its pair once into a virtual environment that later runs reuse
(wheels come from pip's cache), with one distribution of the `keras` package, runs `SUBSET`
(or `FULL`) with a recorder of the private names the processes reach, and fails when a name
known for its releases was reached by no test.
"""

import json
import os
import pathlib
import runpy
import sys
import time
import tomllib
import xml.etree.ElementTree as ElementTree

import nox

ROOT = pathlib.Path(__file__).parent
RESULTS = ROOT / ".nox" / "results"
releases = runpy.run_path(str(ROOT / "mgpu_tf" / "compat" / "releases.py"))
PAIRS = releases["PAIRS"]

# The files whose tests reach mgpu_tf.compat's patches and accessors, run whole.
COMPAT_FILES = [
    "tests/test_compat.py",
    "tests/test_compat_private.py",
    "tests/test_compat_collectives.py",
    "tests/test_compat_metric_sums.py",
    "tests/test_custom_loop.py",
    "tests/test_patches.py",
    "tests/test_keras_steps.py",
    "tests/test_keras_train_step.py",
]

# The files of the fixes those serve (training under each strategy, compared with one device):
# whole in `FULL`; `SUBSET` runs one test of each as a row of CAPABILITIES.
FIX_FILES = [
    "tests/test_equivalence.py",
    "tests/test_sharding.py",
    "tests/test_compression.py",
    "tests/test_epoch_boundaries.py",
]

# The README's three main jobs and the runs of each capability, by node id: the rows of
# docs/compatibility.md's table. `SUBSET` runs the first of each, `FULL` all of them.
CAPABILITIES = {
    "main job, default": [
        "tests/test_train.py::test_main_job_learns_the_digits[argv0-default-1]"],
    "main job, mirrored x2": [
        "tests/test_train.py::test_main_job_learns_the_digits[argv1-mirrored-2]"],
    "main job, 2 workers (launch)": [
        "tests/test_train.py::test_main_job_under_two_local_workers"],
    "model_parallel": [
        "tests/test_model_parallel_training.py::"
        "test_fit_matches_single_device_reference_after_k_steps[mlp-devices0-4]"],
    "hybrid": [
        "tests/test_hybrid.py::test_two_workers_of_two_devices_train_as_one_device_through_launch"],
    "shard_optimizer_state": [
        "tests/test_sharded_state.py::test_four_replicas_train_as_one_device[adam]",
        "tests/test_sharded_state.py::test_two_workers_train_as_one_device[adam-tensorflow]"],
    "steps_per_sync": [
        "tests/test_accumulation.py::"
        "test_mirrored_matches_unaccumulated_update_on_same_examples[2-3-0.9]"],
    "jit_compile + steps_per_execution": [
        "tests/test_keras_steps.py::test_workers_train_like_one_device[3-True]"],
    "transport='tcp'": [
        "tests/test_accumulation.py::"
        "test_two_workers_match_unaccumulated_update_on_same_examples[tcp]"],
    "BackupAndRestore resume": [
        "tests/test_reliability.py::"
        "test_resumes_at_an_epoch_boundary_and_mid_epoch_to_the_uninterrupted_weights"],
    "adaptive shares": [
        "tests/test_adaptive_shards.py::test_update_equals_single_device[tensorflow]"],
    "clipping of the summed gradient": [
        "tests/test_clipping.py::test_mirrored_clips_the_summed_gradient[global_clipnorm]",
        "tests/test_clipping.py::test_sharded_state_clips_over_all_slices[clipnorm]"],
    "BatchNormalization statistics": [
        "tests/test_batchnorm_stats.py::test_mirrored_replicas_hold_the_same_moving_statistics",
        "tests/test_batchnorm_stats.py::"
        "test_sync_batch_norm_trains_as_one_device_on_the_global_batch",
        "tests/test_batchnorm_stats.py::"
        "test_keras_default_batch_norm_normalises_each_replica_and_says_so"],
    "a custom train_step's loss": [
        "tests/test_custom_step_loss.py::test_mirrored_fit_logs_the_one_device_loss[loss]"],
    "validation with steps_per_execution": [
        "tests/test_validation_steps.py::test_every_epochs_validation_is_one_devices[mirrored-2-4]"],
    "a replica without examples": [
        "tests/test_empty_replicas.py::"
        "test_a_step_with_an_empty_replica_is_one_devices_step[one example, 2 replicas-2-2]"],
    "each replica's own Dropout masks": [
        "tests/test_combinations.py::test_keras_alone_draws_the_same_dropout_mask_on_every_replica"],
    "checkpoints hold the sharded slots and sums": [
        "tests/test_checkpoint_paths.py::"
        "test_a_fresh_process_resumes_to_the_uninterrupted_weights[tf.train.Checkpoint-2]"],
    "SIGTERM stops every worker at one step": [
        f"tests/test_signals.py::test_sigterm_stops_every_worker_at_one_step_with_the_chiefs_"
        f"backup[{case}]" for case in ("worker_1_only", "both_over_the_ring",
                                       "hybrid_worker_1_only")],
    "a worker waiting for peers says whom": [
        "tests/test_signals.py::test_a_lone_worker_says_whom_it_waits_for_and_ends_on_sigterm_or_ctrl_c"],
    "Keras' writing callbacks under 2 workers": [
        "tests/test_signals.py::"
        "test_keras_writing_callbacks_are_refused_and_the_toolkits_write_from_the_chief"],
    "a live peer that never joins fails the step (timeout_seconds)": [
        "tests/test_step_watchdog.py::"
        "test_short_steps_keep_their_threads_and_a_live_silent_peer_fails_the_step"],
    "gradient buckets": [
        "tests/test_buckets.py::test_buckets_train_as_one_all_reduce_and_as_one_device"],
    "mirrored and 2 workers train as one device": [
        "tests/test_equivalence.py::test_multi_worker_matches_default",
        "tests/test_equivalence.py::test_mirrored_matches_default[2]"],
    "shard_dataset's uneven tail": [
        "tests/test_sharding.py::test_fit_with_an_uneven_tail_equals_single_device[mirrored-2]"],
    "compression": [
        "tests/test_compression.py::test_mirrored_update_is_the_rounded_float32_update[2-float16]"],
    "a shuffle read by index": [
        "tests/test_epoch_boundaries.py::"
        "test_each_epoch_read_by_index_is_a_new_permutation_of_the_source"],
}

# What CI runs on each pair: the compat files and one test per capability.
SUBSET = COMPAT_FILES + [nodes[0] for nodes in CAPABILITIES.values()
                         if nodes[0].partition("::")[0] not in COMPAT_FILES]
# Before a release (`nox -s <pair> -- full`): the fixes' files and every capability run too.
FULL = COMPAT_FILES + FIX_FILES + [node for nodes in CAPABILITIES.values() for node in nodes
                                   if node.partition("::")[0] not in COMPAT_FILES + FIX_FILES]

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = [pair.session for pair in PAIRS if pair.ci] + ["nightly"]


def _requirements(exclude, project=None):
    """The package's and its `test` extra's requirements (of pyproject.toml's `project`
    table), without those whose names start with one of `exclude`."""
    if project is None:
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["test"]
    return [r for r in wanted if not r.lower().startswith(exclude)]


# Left out of a session's install: TensorFlow and Keras come pinned; `keras-*` (keras-hub,
# keras-nightly) would bring a second Keras, and keras-hub's tensorflow-text pins a
# TensorFlow (pip then backtracks to keras-hub 0.19 and keras 3.15.1 beside keras-nightly);
# tests that need keras-hub skip without it.
_PINNED = ("tensorflow", "keras")

_ONE_KERAS = ("from mgpu_tf.compat import releases; owners = releases.owners(\"keras\"); "
              "print(owners); raise SystemExit(len(owners) != 1)")


_PATCHES = ("import json; from mgpu_tf.compat import patches; installed = patches.install(); "
            "print(json.dumps({name: name in installed for name, *_ in patches.PATCHES}))")


def _run_subset(session, started):
    """Runs `SUBSET` (`FULL` when the session is given `full`) with the recorder, checks the
    names reached, and writes the timings."""
    tests = FULL if "full" in session.posargs else SUBSET
    # Two distributions owning `keras` make the Keras under test a matter of install order.
    session.run("python", "-c", _ONE_KERAS, env={"TF_CPP_MIN_LOG_LEVEL": "3"})
    RESULTS.mkdir(parents=True, exist_ok=True)
    names = RESULTS / f"{session.name}.names"
    names.mkdir(exist_ok=True)
    for old in names.glob("*.txt"):
        old.unlink()
    installed = time.monotonic()
    # Absolute: worker processes start in other folders.
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "support" / "startup"),
                                          str(ROOT / "tests")]),
           "RECORD_PRIVATE_NAMES": str(names), "TF_CPP_MIN_LOG_LEVEL": "2"}
    versions = session.run("python", "-c", "import tensorflow as tf, keras; "
                           "print(tf.__version__, keras.__version__)", silent=True)
    # Which of Keras' patches apply to this release, as training installs them; a release
    # that breaks the installing still runs the tests, which say where.
    try:
        patches = session.run("python", "-c", _PATCHES, silent=True,
                              env={"TF_CPP_MIN_LOG_LEVEL": "3"})
    except nox.command.CommandFailed:
        patches = None
    found = None
    try:
        # Exit code 5 (no tests collected) fails the session like any other but 0.
        try:
            session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"--junitxml={RESULTS / session.name}.xml", *tests, env=env)
            failed = False
        except nox.command.CommandFailed:
            failed = True
        found = counts(RESULTS / f"{session.name}.xml")
        session.log(f"{session.name}: {found['passed']} passed, {found['failed']} failed "
                    f"({found['private_name_errors']} of them PrivateNameError), "
                    f"{found['skipped']} skipped")
        # The names reached, whether or not every test passed.
        session.run("python", "-m", "support.private_names", str(names),
                    env={"PYTHONPATH": "tests", "TF_CPP_MIN_LOG_LEVEL": "3"})
        if failed:
            session.error(f"{found['failed']} tests failed, {found['private_name_errors']} of "
                          "them with PrivateNameError (above)")
    finally:
        ended = time.monotonic()
        (RESULTS / f"{session.name}.json").write_text(json.dumps({
            **{key: found[key] for key in ("failed", "private_name_errors") if found},
            "versions": versions.split()[-2:] if versions else None,
            "patches": json.loads(patches.splitlines()[-1]) if patches else None,
            "install_seconds": round(installed - started),
            "test_seconds": round(ended - installed)}))


def _pair_session(pair):
    @nox.session(name=pair.session)
    def run(session):
        started = time.monotonic()
        # One resolver run: the pins, the package and its test requirements, no other Keras.
        session.install(*pair.pins, "-e", ".", *_requirements(exclude=_PINNED))
        _run_subset(session, started)

    run.__doc__ = (f"The subset on TensorFlow {pair.tensorflow} + Keras {pair.keras} "
                   f"({pair.keras_distribution}).")
    return run


for _pair in PAIRS:
    globals()[f"_session_{_pair.session}"] = _pair_session(_pair)


@nox.session
def nightly(session):
    """The subset on tf-nightly + keras-nightly: what the next releases will break."""
    started = time.monotonic()
    # The nightlies install the packages `tensorflow` and `keras` under other names, so the
    # package goes in without its dependencies, which follow without those two, and with
    # the ml_dtypes tf-nightly asks for.
    session.install("--pre", "--upgrade", "tf-nightly", "keras-nightly")
    session.install("--no-deps", "-e", ".")
    session.install(*_requirements(exclude=(*_PINNED, "ml_dtypes")))
    _run_subset(session, started)


def _outcomes(path):
    """`{node id: "pass" | "fail" | "skip"}` from a pytest junit XML file."""
    outcomes = {}
    for case in ElementTree.parse(path).iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        node = f"{module}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes[node] = "fail"
        elif case.find("skipped") is not None:
            outcomes[node] = "skip"
        else:
            outcomes[node] = "pass"
    return outcomes


def counts(path):
    """`{"passed", "failed", "skipped", "private_name_errors"}` of a pytest junit XML file:
    `failed` counts failures and errors, `private_name_errors` those whose report names
    `PrivateNameError` (a private Keras or TensorFlow name the release no longer has). All 0
    when the file is missing (pytest did not start)."""
    found = dict.fromkeys(("passed", "failed", "skipped", "private_name_errors"), 0)
    if not pathlib.Path(path).exists():
        return found
    for case in ElementTree.parse(path).iter("testcase"):
        bad = [e for e in (case.find("failure"), case.find("error")) if e is not None]
        if bad:
            found["failed"] += 1
            found["private_name_errors"] += any(
                "PrivateNameError" in (e.get("message", "") + (e.text or "")) for e in bad)
        elif case.find("skipped") is not None:
            found["skipped"] += 1
        else:
            found["passed"] += 1
    return found


def table(folder=RESULTS):
    """docs/compatibility.md's table from the sessions' files in `folder`: a row per file and
    capability, a column per session run."""
    sessions = [p.session for p in PAIRS] + ["nightly"]
    ran = [s for s in sessions if (folder / f"{s}.xml").exists()]
    results = {s: _outcomes(folder / f"{s}.xml") for s in ran}
    timings = {s: json.loads((folder / f"{s}.json").read_text()) for s in ran
               if (folder / f"{s}.json").exists()}
    rows = [["", *ran], ["---"] * (len(ran) + 1)]
    for file in COMPAT_FILES + FIX_FILES:
        cells = []
        for s in ran:
            found = [o for n, o in results[s].items() if n.startswith(file + "::")]
            cells.append(f"{found.count('pass')}/{len(found) - found.count('skip')}"
                         if found else "not run")
        rows.append([f"`{pathlib.Path(file).name}` (passed/run)", *cells])
    for capability, nodes in CAPABILITIES.items():
        cells = []
        for s in ran:  # over the nodes the session ran: SUBSET runs the first
            found = [results[s][n] for n in nodes if n in results[s]]
            cells.append("fail" if "fail" in found else
                         "not run" if not found else
                         "skip" if set(found) == {"skip"} else "pass")
        rows.append([capability, *cells])
    for patch in sorted({p for t in timings.values() for p in t.get("patches") or {}}):
        rows.append([f"patch `{patch}`", *(
            {True: "installed", False: "skipped", None: ""}[
                (timings.get(s, {}).get("patches") or {}).get(patch)] for s in ran)])
    rows.append(["release", *(" + ".join(timings[s]["versions"] or []) if s in timings else ""
                              for s in ran)])
    rows.append(["failed (of them PrivateNameError)", *(
        f"{timings[s]['failed']} ({timings[s]['private_name_errors']})"
        if "failed" in timings.get(s, {}) else "" for s in ran)])
    rows.append(["install / tests (min)", *(
        "%.1f / %.1f" % (timings[s]["install_seconds"] / 60, timings[s]["test_seconds"] / 60)
        if s in timings else "" for s in ran)])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


@nox.session(python=False)
def matrix_table(session):
    """Writes the table of the sessions' last results into docs/compatibility.md."""
    page = ROOT / "docs" / "compatibility.md"
    start, end = "<!-- matrix table: nox -s matrix_table -->", "<!-- end of matrix table -->"
    text = page.read_text()
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    page.write_text(f"{head}{start}\n{table()}\n{end}{tail}")
    session.log(f"wrote the table of {page}")


# ------------------------------------------------------------------ Keras' own tests


def _keras_guard_args(posargs):
    """`(python, arguments)`: `--python PATH` taken out of the session's arguments."""
    args = list(posargs)
    if "--python" not in args:
        return "python", args
    at = args.index("--python")
    if at + 1 == len(args):
        raise ValueError("`--python` must be followed by an interpreter's path. Received: "
                         "nothing after it. Use --python .nox/<session>/bin/python")
    return args[at + 1], args[:at] + args[at + 2:]


@nox.session(python=False)
def keras_guard(session):
    """Keras' own tests, of the release the interpreter imports, alone, with every patch and
    under make_strategy("mirrored") (keras_guard/): `nox -s keras_guard -- [--area full]
    [--python PATH]`, the interpreter on PATH by default."""
    python, args = _keras_guard_args(session.posargs)
    session.run(python, "-m", "keras_guard.run", *args, env={"PYTHONPATH": str(ROOT)})


if __name__ == "__main__":
    sys.exit("run it with nox: pip install nox && nox -l")
