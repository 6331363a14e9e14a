"""The main job, run as a user runs it: a fresh process per strategy."""

import concurrent.futures
import functools
import math
import re
import subprocess
import sys
import tempfile
import time

import pytest
from absl import flags

from support import main_job
from support import workers

EPOCHS, GLOBAL_BATCH = 4, 64


def _as_a_user_runs_it():
    """The test environment without TF_CPP_MIN_LOG_LEVEL, which a user rarely sets."""
    env = workers.environment()
    del env["TF_CPP_MIN_LOG_LEVEL"]
    return env


@functools.lru_cache(maxsize=None)
def _run_timed(*args, timeout=600):
    """Runs the main job as a user would, noting when each line of its output arrives.

    Each command runs once per session; the tests that need it share the result.

    Returns:
        (exit code, stdout text, stderr text, [(seconds since the start, line), ...]).
    """
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen([sys.executable, "-m", "mgpu_tf.train", *args],
                                   env=_as_a_user_runs_it(), stdout=subprocess.PIPE,
                                   stderr=errors)
        start, lines = time.perf_counter(), []
        try:
            for raw in process.stdout:
                lines.append((time.perf_counter() - start, raw.decode(errors="replace")))
            process.wait(timeout=timeout)
        finally:
            process.kill()
            process.wait()
        errors.seek(0)
        return process.returncode, "".join(text for _, text in lines), errors.read(), lines


@pytest.mark.parametrize("argv, strategy, replicas", [
    ([], "default", 1),
    (["--strategy=mirrored", "--simulate_devices=2"], "mirrored", 2),
])
def test_main_job_learns_the_digits(argv, strategy, replicas):
    code, out, err, lines = _run_timed(f"--epochs={EPOCHS}",
                                       f"--global_batch_size={GLOBAL_BATCH}", *argv)
    assert code == 0, err[-3000:]
    assert out.strip().splitlines()[-1].startswith("done:"), "the job printed after its result"
    done = main_job.parse_done(out)
    assert (done["strategy"], done["replicas"]) == (strategy, replicas)
    assert done["test_accuracy"] > 0.8, f"{done['test_accuracy']=} after {EPOCHS} epochs"
    # Its speed is a benchmark's figure (benchmarks/bench_time_to_train.py); here, that
    # each figure is there, in its kind: a positive, finite rate or number of seconds.
    for name in ("examples_per_sec", "steps_examples_per_sec", "fit_seconds"):
        assert math.isfinite(done[name]) and done[name] > 0, (name, done)
    # Nothing but the job's own lines: no Keras warning about shuffling a data set and
    # none of TensorFlow's C++ start-up lines (oneDNN, CUDA) on this CPU-only machine.
    assert "`shuffle=True` was passed" not in err, err[-3000:]
    for noise in ("absl::InitializeLog", "oneDNN", "cuda", "cuInit"):
        assert noise not in err, err[-3000:]
    # The training and test data sets make the same sharding choice, named once.
    chose = [line for line in err.splitlines() if "sharding policy 'auto' chose" in line]
    assert len(chose) == 1, chose


def test_the_done_line_says_its_loss_and_accuracy_are_the_held_out_splits():
    # The progress bar shows `loss` and `accuracy` on the training data; the done line's
    # figures come from model.evaluate on the test split, so they carry its name.
    from mgpu_tf import train

    line = train.format_result({"strategy": "default", "replicas": 1, "examples_per_sec": 812.5,
                                "steps_examples_per_sec": 900.0, "fit_seconds": 3.0,
                                "test_loss": 0.25, "test_accuracy": 0.9})
    assert line == ("done: strategy=default replicas=1 examples_per_sec=812.5 "
                    "steps_examples_per_sec=900.0 fit_seconds=3.00 "
                    "test_loss=0.2500 test_accuracy=0.9000")
    assert main_job.parse_done(line)["test_accuracy"] == 0.9


@functools.lru_cache(maxsize=None)
def _two_workers():
    return workers.run_workers("-m", 2, "mgpu_tf.train", "--strategy=multi_worker",
                               f"--epochs={EPOCHS}", f"--global_batch_size={GLOBAL_BATCH}")


@pytest.mark.multiworker
def test_main_job_under_two_local_workers():
    code, outputs = _two_workers()
    assert code == 0, outputs
    main_job.assert_trained_alike([(code, outputs[i]) for i in (0, 1)], "workers")
    for i in (0, 1):
        assert main_job.parse_done(outputs[i])["test_accuracy"] > 0.8


@pytest.mark.multiworker
def test_every_strategy_ends_where_the_default_strategy_does():
    """Shuffled every epoch, the same examples in the same order under every strategy.

    Only the order of sums differs (replicas' gradients added up by the all-reduce),
    so the results agree to float rounding, far below the 5e-3 that a different
    shuffle makes.
    """
    common = (f"--epochs={EPOCHS}", f"--global_batch_size={GLOBAL_BATCH}")
    runs = {"default": _run_timed(*common)[:2],
            "mirrored x2": _run_timed(*common, "--strategy=mirrored",
                                      "--simulate_devices=2")[:2]}
    # On four devices the test set's last step (270 = 4 * 64 + 14) splits 4, 4, 3, 3.
    others = {"one_device": ["--strategy=one_device"],
              "mirrored x1": ["--strategy=mirrored", "--simulate_devices=1"],
              "mirrored x4": ["--strategy=mirrored", "--simulate_devices=4"]}
    # Independent of each other: started together, not one after another.
    with concurrent.futures.ThreadPoolExecutor(len(others)) as pool:
        results = pool.map(lambda argv: workers.run_python("-m", "mgpu_tf.train", *common, *argv),
                           others.values())
        for name, result in zip(others, results):
            runs[name] = (result.returncode, result.stdout + result.stderr)
    code, outputs = _two_workers()
    runs["2 workers"] = (code, outputs[0])
    finals = {}
    for name, (code, out) in runs.items():
        assert code == 0, (name, out[-3000:])
        done = main_job.parse_done(out)
        finals[name] = (done["test_loss"], done["test_accuracy"])
    loss, accuracy = finals["default"]
    for name, (other_loss, other_accuracy) in finals.items():
        assert abs(other_loss - loss) <= 1e-4 * loss, finals
        assert abs(other_accuracy - accuracy) <= 1e-3, finals


def test_bad_flag_fails_fast_with_the_message():
    result = subprocess.run([sys.executable, "-m", "mgpu_tf.train", "--strategy=mirrored",
                             "--all_reduce=ring"], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "`all_reduce` for mirrored must be one of" in result.stderr
    assert "Epoch" not in result.stdout


def test_indivisible_global_batch_names_both_numbers():
    result = workers.run_python("-m", "mgpu_tf.train", "--strategy=mirrored",
                                "--simulate_devices=4", "--global_batch_size=30", "--epochs=1")
    assert result.returncode != 0
    assert ("`global_batch_size` must be divisible by the number of replicas (4). "
            "Received: global_batch_size=30. Use 28 or 32") in result.stderr


@pytest.fixture
def parsed_flags():
    """Parses the main job's flags in this process, as `app.run` would; undone after."""
    from mgpu_tf import train

    def parse(*argv):
        flags.FLAGS.unparse_flags()
        flags.FLAGS(["mgpu_tf.train", *argv])
        return train

    yield parse
    flags.FLAGS.unparse_flags()


@pytest.mark.parametrize("argv, message", [
    # This session has 4 CPU devices, so mirrored has 4 replicas.
    (["--strategy=mirrored", "--global_batch_size=3"],
     "`global_batch_size` must be at least the number of replicas (4)"),
    (["--strategy=tpu"], "No TPU is reachable"),
])
def test_bad_input_found_after_parsing_ends_the_job_in_one_line(
        parsed_flags, capsys, argv, message):
    train = parsed_flags(*argv)
    with pytest.raises(SystemExit) as exit_:
        train.main(["mgpu_tf.train"])
    assert exit_.value.code == 1
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"FATAL mgpu_tf.train: {message}"), last


def test_a_device_that_is_not_there_fails_at_parse_time_under_the_default_strategy():
    # The default --strategy=auto, as under a named strategy: absl's FATAL line and its hint,
    # naming the flag that splits the CPU, not the Python call.
    result = subprocess.run([sys.executable, "-m", "mgpu_tf.train", "--devices=GPU:7"],
                            env=_as_a_user_runs_it(), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    fatal, hint = result.stderr.splitlines()
    assert fatal.startswith("FATAL Flags parsing error: flag --devices=GPU:7: `devices` names "
                            "'GPU:7', which does not exist."), fatal
    assert "--simulate_devices=N" in fatal, fatal
    assert hint == "Pass --helpshort or --helpfull to see help on flags.", hint
    assert result.stdout == ""


def test_a_bad_input_is_all_a_user_sees():
    result = subprocess.run([sys.executable, "-m", "mgpu_tf.train", "--strategy=tpu"],
                            env=_as_a_user_runs_it(), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "FATAL mgpu_tf.train: No TPU is reachable: this machine has no TPU devices and "
        "neither `tpu` nor TPU_NAME names one. Received: tpu=None. Pass "
        "tpu='grpc://host:8470' or a TPU name, or use another strategy."], result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf"])
def test_a_learning_rate_that_cannot_train_fails_at_its_flag(parsed_flags, value):
    # Such a rate used to train to the end and report test_loss=nan, with exit code 0.
    with pytest.raises(flags.IllegalFlagValueError,
                       match=rf"^flag --learning_rate={float(value)}: `learning_rate` must be a "
                             "finite number above 0. Received: learning_rate="):
        parsed_flags(f"--learning_rate={value}")


def test_train_refuses_a_learning_rate_that_cannot_train():
    import mgpu_tf
    from mgpu_tf import train

    with pytest.raises(ValueError, match="`learning_rate` must be a finite number above 0"):
        train.train(mgpu_tf.make_strategy("default"), learning_rate=float("nan"), epochs=1)


def test_a_backup_dir_under_a_file_fails_at_its_flag(parsed_flags, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(flags.IllegalFlagValueError,
                       match=f"^flag --backup_dir={re.escape(str(afile))}/backup: `backup_dir` "
                             "must be a directory that can be made, but it lies under"):
        parsed_flags(f"--backup_dir={afile}/backup")


def test_a_misspelt_strategy_ends_the_job_before_tensorflow_is_imported():
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "mgpu_tf.train",
                             "--epochs=1", "--strategy", "mirorred"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert lines == [
        "FATAL Flags parsing error: flag --strategy=mirorred: Unknown strategy 'mirorred'. "
        "Did you mean 'mirrored'? Known strategies: auto, default, hybrid, mirrored, "
        "model_parallel, multi_worker, one_device, tpu; aliases: multi_worker_mirrored "
        "(multi_worker), none (default), off (default).",
        "Pass --helpshort or --helpfull to see help on flags."], result.stderr[-3000:]
    assert " tensorflow\n" not in result.stderr and "| tensorflow" not in result.stderr
