"""`mgpu-tf`'s answers to bad input: a near miss named, a refusal before anything starts, the
rule, what was received and the fix."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from mgpu_tf.cli import main as cli_main
from mgpu_tf.cluster import launcher
from support.manifests import TRAIN, k8s, manifests


def _exit(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def _k8s(capsys, *args):
    return k8s(capsys, *args, "--", *TRAIN)


def _marking_command(path):
    """A worker command that leaves `path` behind when it starts."""
    return [sys.executable, "-c", f"open({str(path)!r}, 'w').close()"]


@pytest.mark.parametrize("argv, line", [
    (["launch", "--workerz", "2", "--", "true"],
     "mgpu-tf launch: error: unrecognized arguments: --workerz. Did you mean --workers?"),
    (["launch", "--workers", "2", "--grace-secondz", "3", "--", "true"],
     "mgpu-tf launch: error: unrecognized arguments: --grace-secondz. Did you mean "
     "--grace_seconds?"),
    (["plan", "--modle", "m:f", "--global_batch_size", "8"],
     "mgpu-tf plan: error: unrecognized arguments: --modle. Did you mean --model?"),
    (["k8s", "--image", "i", "--gpu_per_worker=2"],
     "mgpu-tf k8s: error: unrecognized arguments: --gpu_per_worker=2. Did you mean "
     "--gpus_per_worker?"),
    (["env", "-v", "--verbos"],
     "mgpu-tf env: error: unrecognized arguments: --verbos. Did you mean --verbose?"),
])
def test_a_misspelt_option_gets_the_nearest_name(capsys, argv, line):
    code, out, err = _exit(capsys, argv)
    assert code == 2 and out == ""
    assert err.splitlines()[-1] == line, err


def test_a_misspelt_command_gets_the_nearest_name(capsys):
    code, out, err = _exit(capsys, ["lauch", "--workers", "2"])
    assert code == 2 and out == ""
    line = err.splitlines()[-1]
    assert line.startswith("mgpu-tf: error: the command must be one of launch, env, k8s, "), err
    assert line.endswith(". Received: 'lauch'. Did you mean launch?"), err


@pytest.mark.parametrize("grace", ["-1", "nan", "inf"])
def test_a_grace_that_is_no_time_is_refused_before_any_worker_starts(capsys, tmp_path, grace):
    marker = tmp_path / "ran"
    code = cli_main(["launch", "--workers", "2", "--grace_seconds", grace, "--",
                     *_marking_command(marker)])
    err = capsys.readouterr().err
    assert code == 2 and not marker.exists()
    assert err.startswith("mgpu-tf launch: `grace_seconds` must be a number of seconds of at "
                          "least 0 (how long a stopped worker gets before SIGKILL). Received: "
                          f"grace_seconds={float(grace)!r}. Use e.g. 10"), err


def test_the_python_launch_refuses_a_negative_grace():
    with pytest.raises(launcher.LaunchError, match="`grace_seconds` must be a number"):
        launcher.launch(["true"], 1, grace_seconds=-1)


def test_more_workers_than_the_open_file_limit_allows_are_refused_before_any_starts(tmp_path):
    # 64 files: 2 pipes a worker leave room for fewer than 30 workers.
    script = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(
            resource.RLIMIT_NOFILE)[1]))
        from mgpu_tf.cli import main
        sys.exit(main(["launch", "--workers", "100", "--grace_seconds", "1", "--",
                       sys.executable, "-c", "open({str(tmp_path)!r} + '/ran', 'a').close()"]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert not (tmp_path / "ran").exists()
    assert done.stderr.startswith(
        "mgpu-tf launch: `workers` must fit this process' open-file limit (64, `ulimit -n`): "
        "the launcher keeps 2 pipes open per worker (its stdout and stderr), so 100 workers "
        "need "), done.stderr
    assert "Received: workers=100. Use at most " in done.stderr
    assert "`ulimit -n " in done.stderr


def test_calibrate_refuses_before_it_announces_the_run(capsys, tmp_path):
    marker = tmp_path / "ran"
    code = cli_main(["calibrate", "--workers", "2", "--repeats", "1", "--",
                     *_marking_command(marker)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and not marker.exists()
    assert err == "mgpu-tf calibrate: --repeats must be at least 2. Received: --repeats=1\n"


def test_calibrate_checks_the_command_before_it_announces_the_run(capsys):
    code = cli_main(["calibrate", "--workers", "2", "--", "no-such-program"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("mgpu-tf calibrate: The command's program must be found on PATH.")


def _run_plan(*args):
    """Runs `mgpu-tf plan ARGS` in a fresh process; `(code, stderr, whether TensorFlow had
    been imported when the command returned)`."""
    script = textwrap.dedent(f"""
        import sys
        from mgpu_tf.cli import main
        code = main({["plan", *args]!r})
        print("tensorflow" in sys.modules)
        sys.exit(code)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    return done.returncode, done.stderr, done.stdout.splitlines()[-1:] == ["True"]


@pytest.mark.parametrize("flags, start", [
    (["--device_memory", "lots"], "mgpu-tf plan: `--device_memory` must be a size: "),
    (["--optimizer", "adamm"], "mgpu-tf plan: --optimizer must be one of adadelta, adagrad, "
     "adam, "),
    (["--jitter", "5"], "mgpu-tf plan: `--jitter` must be a fraction of the step, at least 0 and "
     "below 1 (the default 0.02 is 2%). Received: --jitter=5.0. For 5%, give 0.05."),
    (["--bandwidth", "-1"], "mgpu-tf plan: `bandwidth` must be a positive number. Received: "
     "bandwidth=-1.0"),
])
def test_plan_refuses_a_bad_argument_before_tensorflow_is_imported(flags, start):
    code, err, imported = _run_plan("--model", "support.planner_models:lopsided",
                                    "--global_batch_size", "8", "--no_measure", *flags)
    assert code == 2 and err.startswith(start), err
    assert not imported


def test_a_misspelt_optimizer_gets_the_nearest_name(capsys):
    code = cli_main(["plan", "--model", "support.planner_models:lopsided",
                     "--global_batch_size", "8", "--optimizer", "adamm"])
    assert code == 2
    assert capsys.readouterr().err.endswith(". Received: --optimizer='adamm'. Did you mean "
                                            "adam?\n")


@pytest.mark.parametrize("name, content, kind", [
    ("corrupt.keras", b"garbage\n", "a zip archive, as .keras files are"),
    ("corrupt.h5", b"", "an HDF5 file"),
])
def test_a_saved_model_that_is_no_keras_file_is_named_so_before_tensorflow(tmp_path, name,
                                                                              content, kind):
    path = tmp_path / name
    path.write_bytes(content)
    code, err, imported = _run_plan("--model", str(path), "--global_batch_size", "8",
                                    "--no_measure")
    assert code == 2 and not imported
    assert err == (f"mgpu-tf plan: --model names a file that could not be read as a Keras "
                   f"model: it is not {kind} (it starts with {content[:8]!r}). Received: "
                   f"--model={str(path)!r}. Save the model again with model.save("
                   f"{str(path)!r}), or give MODULE:FUNCTION.\n"), err


def test_an_unbuilt_model_is_said_to_be_unbuilt_with_how_to_build_it(capsys, tmp_path):
    module = tmp_path / "my_models.py"
    module.write_text("import keras\n\n\ndef unbuilt():\n    return keras.Sequential("
                      "[keras.layers.Dense(4), keras.layers.Dense(1)])\n")
    spec = f"{module}:unbuilt"
    code = cli_main(["plan", "--model", spec, "--global_batch_size", "8", "--no_measure"])
    assert code == 2
    assert capsys.readouterr().err == (
        "mgpu-tf plan: --model: unbuilt() must return a built model: one that knows its input's "
        f"shape and so has its weights. Received: --model={spec!r}, an unbuilt Sequential. "
        "Start it with keras.Input(shape=...), or call model.build((None, ...)) before "
        "returning it.\n")


def test_plan_refuses_a_jitter_of_a_whole_step_or_more():
    import mgpu_tf
    from support import planner_models

    with pytest.raises(ValueError, match=r"^`jitter` must be a fraction of the step, at least 0 "
                       r"and below 1 \(the default 0.02 is 2%\). Received: jitter=1.0. For 1%, "
                       r"give 0.01.$"):
        mgpu_tf.plan(planner_models.lopsided(), devices=2, device_memory="1GiB",
                     global_batch_size=8, jitter=1.0, measure_compute=False)


@pytest.mark.parametrize("batch", [3, 5])
def test_plan_refuses_a_batch_the_recommended_replicas_cannot_share(batch):
    import mgpu_tf
    from mgpu_tf.data import split
    from support import planner_models

    # The reference: shard_dataset's own split refuses it over 2 replicas.
    with pytest.raises(ValueError, match="must be divisible by the number of replicas"):
        split.replica_batch_sizes(batch, 1, 2)
    with pytest.raises(ValueError) as caught:
        mgpu_tf.plan(planner_models.lopsided(), devices=2, device_memory="1GiB",
                     global_batch_size=batch, measure_compute=False)
    lower = batch // 2 * 2
    assert str(caught.value) == (
        "`global_batch_size` must be divisible by the number of replicas (2) of the layout the "
        "plan recommends, data parallel over 2 devices, as `shard_dataset` requires. Received: "
        f"global_batch_size={batch}. Use {lower} or {lower + 2}.")



@pytest.fixture(scope="module")
def two_device_plan(tmp_path_factory):
    """`mgpu-tf plan --json` for 2 devices per worker, written to a file."""
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    done = subprocess.run(
        [sys.executable, "-m", "mgpu_tf.cli", "plan", "--model", "support.planner_models:lopsided",
         "--global_batch_size", "64", "--devices", "2", "--device_memory", "1GiB",
         "--no_measure", "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    path.write_text(done.stdout)
    assert json.loads(done.stdout)["devices"] == 2
    return path


def test_k8s_refuses_more_gpus_than_the_plan_sized_the_memory_for(capsys, two_device_plan):
    code, out, err = _k8s(capsys, "--image", "i", "--from_plan", str(two_device_plan),
                          "--gpus_per_worker", "4")
    assert code == 2 and out == ""
    assert err == ("mgpu-tf k8s: `gpus_per_worker` must be the plan's devices per worker (2), "
                   "for which it sized the memory. Received: gpus_per_worker=4, from_plan="
                   f"{str(two_device_plan)!r}. Leave --gpus_per_worker out, or plan again with "
                   "--devices 4.\n")


def test_k8s_gives_each_worker_the_plans_devices_as_gpus(capsys, two_device_plan):
    documents = manifests(capsys, "--image", "i", "--from_plan", str(two_device_plan))
    (job,) = [d for d in documents if d["kind"] == "Job"]
    limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 2


def test_k8s_says_a_json_file_is_no_plan_and_what_it_holds(capsys, tmp_path):
    path = tmp_path / "notplan.json"
    path.write_text('{"hello": 1}')
    code, out, err = _k8s(capsys, "--image", "i", "--from_plan", str(path))
    assert code == 2 and out == ""
    assert err == ("mgpu-tf k8s: `from_plan` must be the JSON of `mgpu-tf plan --json`. "
                   f"Received: from_plan={str(path)!r} (a JSON object with the keys 'hello', "
                   "not a plan's 'recommended', 'options', 'devices'). Write it with `mgpu-tf "
                   "plan --model ... --global_batch_size N --json > plan.json`.\n")



def test_top_names_no_straggler_within_the_noise_of_identical_workers():
    from mgpu_tf.cli import top

    def rows(*computes):
        return {(f"127.0.0.1:{9400 + i}", i): {"mgpu_tf_compute_seconds": c}
                for i, c in enumerate(computes)}

    # 101 ms against 100: 1.01x the median, well inside 10%.
    table = top.render(rows(0.100, 0.101, 0.100))
    assert "*" not in table
    assert table.splitlines()[-1] == ("straggler: none (the slowest compute is 1.01x the "
                                      "median, within the 10% that identical workers vary by)")
    # 150 ms against 100: named.
    table = top.render(rows(0.100, 0.150, 0.100))
    assert table.splitlines()[-1] == "straggler: worker 1 (compute 150.0 ms, 1.50x the median)"
    assert [line.split()[0] for line in table.splitlines()[1:4]] == ["0", "*1", "2"]
