"""absl flags: parsed into make_strategy arguments, bad values rejected at parse time."""

import pytest
import tensorflow as tf
from absl import flags

import mgpu_tf
from mgpu_tf import flags as mgpu_flags
from support import models
from support import workers


@pytest.fixture
def flag_values():
    values = flags.FlagValues()
    flags.DEFINE_integer("epochs", 1, "the user's own flag", flag_values=values)
    mgpu_flags.define_flags(values)
    return values


def test_defining_twice_is_harmless(flag_values):
    mgpu_flags.define_flags(flag_values)
    flag_values(["prog"])
    assert flag_values.strategy == "auto"


def test_flags_become_make_strategy_arguments(flag_values):
    flag_values(["prog", "--strategy=mirrored", "--devices=cpu:0,cpu:2",
                 "--all_reduce=hierarchical_copy", "--num_packs=2", "--epochs=3"])
    kind, options = mgpu_flags.strategy_options(flag_values)
    assert kind == "mirrored"
    assert options == {"devices": ["cpu:0", "cpu:2"], "all_reduce": "hierarchical_copy",
                       "num_packs": 2}
    assert flag_values.epochs == 3
    strategy = mgpu_flags.make_strategy_from_flags(flag_values)
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == 2


def test_a_single_number_for_devices_is_a_count(flag_values):
    flag_values(["prog", "--strategy=mirrored", "--devices=4"])
    assert mgpu_flags.strategy_options(flag_values)[1] == {"devices": 4}
    assert mgpu_flags.make_strategy_from_flags(flag_values).num_replicas_in_sync == 4


def test_a_digit_that_is_not_ascii_is_a_device_name(flag_values):
    # '²' is a digit to str.isdigit(), not to int(): it is read as a device name, which
    # is refused at parse time, under "auto" as under a named strategy.
    for strategy in ("auto", "mirrored"):
        with pytest.raises(flags.IllegalFlagValueError,
                           match="^flag --devices=²: A device must look like"):
            flag_values(["prog", f"--strategy={strategy}", "--devices=²"])


def test_worker_hosts_and_task_index(flag_values):
    flag_values(["prog", "--strategy=multi_worker", "--worker_hosts=127.0.0.1:1,127.0.0.1:2",
                 "--task_index=1"])
    assert mgpu_flags.strategy_options(flag_values) == (
        "multi_worker", {"worker_hosts": ["127.0.0.1:1", "127.0.0.1:2"], "task_index": 1})


@pytest.mark.parametrize("argv, match", [
    (["--strategy=bogus"], "Unknown strategy 'bogus'. Known strategies"),
    (["--strategy=mirrored", "--all_reduce=ring"], "`all_reduce` for mirrored must be one of"),
    (["--strategy=mirrored", "--all_reduce=nccl"], "`all_reduce='nccl'` needs NCCL"),
    (["--strategy=default", "--num_packs=2"], "`num_packs` does not apply to strategy 'default'"),
    (["--strategy=mirrored", "--devices=9"], "`devices` asks for 9 devices"),
    (["--strategy=mirrored", "--devices=cpu:0,cpu:9"],
     "`devices` names 'cpu:9', which does not exist"),
    # "auto" checks each value alone at parse time too: the strategy it picks comes later.
    (["--devices=GPU:7"], r"^flag --devices=GPU:7: `devices` names 'GPU:7', which does not "
     r"exist\. .* split the CPU first: mgpu_tf\.simulate_devices\(N\) in Python, "
     r"--simulate_devices=N with mgpu_tf's flags\.$"),
    (["--devices=9"], r"^flag --devices=9: `devices` asks for 9 devices .* "
     r"--simulate_devices=9 with mgpu_tf's flags\.$"),
    (["--strategy=multi_worker", "--worker_hosts=127.0.0.1:1", "--task_index=4"],
     "`task_index` must be in 0..0"),
    (["--simulate_devices=2"], r"simulate_devices\(2\) must be called before TensorFlow starts"),
    (["--simulate_devices=-1"], r"^flag --simulate_devices=-1: --simulate_devices must be 0 "
     r"\(off\) or the number of logical devices"),
    (["--strategy=multi_worker", "--transport=udp"], "`transport` must be one of tensorflow, tcp"),
    (["--strategy=mirrored", "--transport=tcp"], "`transport` does not apply to strategy"),
])
def test_bad_values_fail_at_parse_time_with_make_strategys_message(flag_values, argv, match):
    with pytest.raises(flags.IllegalFlagValueError, match=match):
        flag_values(["prog", *argv])


def test_model_parallel_flags(flag_values):
    flag_values(["prog", "--strategy=model_parallel", "--devices=2", "--balance=1,3",
                 "--microbatches=4"])
    assert mgpu_flags.strategy_options(flag_values) == (
        "model_parallel", {"devices": 2, "balance": [1, 3], "microbatches": 4})
    values = flags.FlagValues()
    mgpu_flags.define_flags(values)
    values(["prog", "--strategy=model_parallel", "--balance=time"])
    assert mgpu_flags.strategy_options(values)[1] == {"balance": "time"}


def test_recompute_and_deferred_batch_norm_reach_the_pipeline(flag_values):
    flag_values(["prog", "--strategy=model_parallel", "--devices=2", "--microbatches=4",
                 "--recompute=except_last", "--deferred_batch_norm"])
    strategy = mgpu_flags.make_strategy_from_flags(flag_values)
    model = mgpu_tf.prepare_model(models.with_batch_norm(), strategy)
    assert (model.recompute, model.deferred_batch_norm, model.microbatches) == (
        "except_last", True, 4)
    values = flags.FlagValues()
    mgpu_flags.define_flags(values)
    values(["prog", "--strategy=model_parallel", "--nodeferred_batch_norm"])
    assert mgpu_flags.strategy_options(values)[1] == {"deferred_batch_norm": False}


@pytest.mark.parametrize("argv, match", [
    (["--strategy=model_parallel", "--microbatches=0"], "`microbatches` must be at least 1"),
    (["--strategy=model_parallel", "--balance=weight"], "`balance` must be one of"),
    (["--strategy=mirrored", "--microbatches=2"], "`microbatches` does not apply to strategy"),
    (["--strategy=model_parallel", "--recompute=sometimes"], "`recompute` must be one of"),
    (["--strategy=mirrored", "--deferred_batch_norm"],
     "`deferred_batch_norm` does not apply to strategy"),
])
def test_bad_model_parallel_flags(flag_values, argv, match):
    with pytest.raises(flags.IllegalFlagValueError, match=match):
        flag_values(["prog", *argv])


def test_hybrid_flags(flag_values):
    flag_values(["prog", "--strategy=hybrid", "--devices_per_worker=2", "--microbatches=2"])
    assert mgpu_flags.strategy_options(flag_values) == (
        "hybrid", {"devices_per_worker": 2, "microbatches": 2})


def test_the_flags_are_the_calling_modules_key_flags(flag_values):
    names = {flag.name for flag in flag_values.get_key_flags_for_module(__name__)}
    assert {"strategy", "simulate_devices", "devices", "jit_compile", "epochs"} <= names


def test_the_main_job_lists_the_strategy_flags_under_help():
    result = workers.run_python("-m", "mgpu_tf.train", "--help", timeout=120)
    for flag in ("--strategy", "--simulate_devices", "--devices_per_worker", "--epochs"):
        assert flag in result.stdout, flag
    assert "--helpfull" in result.stdout and "--xml_output_file" not in result.stdout
