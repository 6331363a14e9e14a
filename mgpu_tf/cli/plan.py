"""`mgpu-tf plan`: memory per device for data, model and hybrid parallelism, and which to use.

Build the model a function returns, or load a saved .keras or .h5 model, add up each device's
parameters, gradients, optimizer slots and the activations a training step keeps alive for data,
model and hybrid parallelism, predict the data-parallel step over 1, 2, 4, ... devices, and
recommend one. Devices may be declared: --devices 8 --device_memory 80GiB --device_throughput
400 plans for hardware you do not have (400 examples/s: one of those devices' speed on the
model).
"""

import importlib
import importlib.util
import json
import os
import sys
import zipfile

from mgpu_tf.cli import parsing
from mgpu_tf.compat import native_logs
from mgpu_tf.planner import inputs
from mgpu_tf.planner import interconnect as interconnect_lib
from mgpu_tf.planner import step_model

__all__ = ["add_parser", "plan_command", "load_model", "check_model_spec"]

_SAVED_MODEL_SUFFIXES = (".keras", ".h5")
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def add_parser(subparsers):
    parser = parsing.add_command(subparsers, plan_command, __doc__)
    parser.add_argument("--model", required=True, metavar="MODULE:FUNCTION|FILE",
                        help="a function returning a built Keras model (MODULE may be a "
                        "dotted module name or a path to a .py file), or a saved Keras "
                        "model (.keras or .h5)")
    parser.add_argument("--global_batch_size", type=int, required=True,
                        help="examples per step over all devices")
    parser.add_argument("--devices", type=int, default=None,
                        help="devices per worker (default: this machine's)")
    parser.add_argument("--device_memory", default=None,
                        help="memory of each device, e.g. 80GiB or '16 GB' (default: the "
                        "GPUs' memory, or RAM shared by the CPU devices)")
    parser.add_argument("--workers", type=int, default=1, help="workers (default 1)")
    parser.add_argument("--sequence_length", type=int, default=None,
                        help="length of the dimensions the model's inputs leave open besides "
                        "the batch, a text model's sequence (default: the model's "
                        "preprocessor's sequence_length, if it has one)")
    parser.add_argument("--optimizer", default="adam", help="optimizer name (default adam)")
    parser.add_argument("--interconnect", default="pcie",
                        help=f"one of {', '.join(interconnect_lib.INTERCONNECTS)} "
                        "(default pcie, PCIe 3.0 x16; figures and sources in docs/planner.md)")
    parser.add_argument("--bandwidth", type=float, default=None,
                        help="link bandwidth in bytes/s one way, instead of the interconnect's")
    parser.add_argument("--latency", type=float, default=None,
                        help="seconds per ring hop, instead of the interconnect's")
    parser.add_argument("--device_throughput", type=float, default=None,
                        help="examples/s one of the planned devices trains the model at, "
                        "for the step-time prediction")
    parser.add_argument("--compute_seconds", type=float, default=None,
                        help="seconds of one device's step on its share of the batch, "
                        "instead of --device_throughput")
    parser.add_argument("--schedule", default="keras",
                        help=f"how the all-reduce runs: one of {', '.join(step_model.SCHEDULES)}"
                        " (default keras)")
    parser.add_argument("--jitter", type=float, default=step_model.DEFAULT_JITTER,
                        help="step-to-step variation of a device's compute, a fraction of the "
                        "step from 0 to below 1, for the wait for the slowest device "
                        f"(default {step_model.DEFAULT_JITTER})")
    parser.add_argument("--epoch_examples", type=int, default=None,
                        help="examples in an epoch: also predict an epoch's time")
    parser.add_argument("--epoch_overhead", type=float, default=0.0,
                        help="seconds an epoch spends outside its steps (evaluation, "
                        "checkpoints), measured on one device (default 0)")
    parser.add_argument("--no_measure", action="store_true",
                        help="without --device_throughput or --compute_seconds, do not time a "
                        "step here (no step-time prediction)")
    parser.add_argument("--json", action="store_true",
                        help="print the plan as JSON instead of tables")
    return parser


def load_model(spec):
    """Returns the Keras model that `MODULE:FUNCTION` builds or a saved file holds.

    Raises `ValueError` saying which part failed: the spec, the import, the function, its
    result, or the saved file.
    """
    check_model_spec(spec)
    if str(spec).endswith(_SAVED_MODEL_SUFFIXES):
        return _load_saved_model(str(spec))
    module_name, _, function_name = str(spec).rpartition(":")
    try:
        if module_name.endswith(".py"):
            loader = importlib.util.spec_from_file_location("_mgpu_tf_plan_model", module_name)
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
        else:
            sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
    except Exception as error:  # the user's module may raise anything
        raise ValueError(f"--model: could not import the module {module_name!r}: "
                         f"{type(error).__name__}: {error}. Received: --model={spec!r}") from error
    function = getattr(module, function_name, None)
    if function is None:
        raise ValueError(f"--model: the module {module_name!r} has no {function_name!r}. "
                         f"Received: --model={spec!r}")
    if not callable(function):
        raise ValueError(f"--model: {function_name!r} in {module_name!r} is not a function. "
                         f"Received: --model={spec!r}")
    try:
        model = function()
    except Exception as error:
        raise ValueError(f"--model: calling {function_name}() from {module_name!r} failed: "
                         f"{type(error).__name__}: {error}. Received: --model={spec!r}") from error
    import keras

    if not isinstance(model, keras.Model):
        raise ValueError(f"--model: {function_name}() returned {type(model).__name__}, not a "
                         f"Keras model. Received: --model={spec!r}")
    if not model.built:
        # Until it knows its input's shape, a model has no weights, and the planner counts them.
        raise ValueError(f"--model: {function_name}() must return a built model: one that "
                         "knows its input's shape and so has its weights. Received: "
                         f"--model={spec!r}, an unbuilt {type(model).__name__}. Start it with "
                         "keras.Input(shape=...), or call model.build((None, ...)) before "
                         "returning it.")
    return model


def check_model_spec(spec):
    """Raises `ValueError` for a `--model` that names no model, before anything is imported:
    a spec that is not `MODULE:FUNCTION`, or a file (the saved model, the .py) that is missing
    or is not what its suffix says."""
    spec = str(spec)
    if spec.endswith(_SAVED_MODEL_SUFFIXES):
        if not os.path.isfile(spec):
            raise ValueError(f"--model names a saved model that does not exist. Received: "
                             f"--model={spec!r}. Check the path.")
        _check_saved_format(spec)
        return
    module_name, _, function_name = spec.rpartition(":")
    if not module_name or not function_name:
        raise ValueError("--model must be MODULE:FUNCTION, a function returning a Keras "
                         "model, or a saved Keras model (.keras or .h5). Received: "
                         f"--model={spec!r}. For example my_models:build or best.keras.")
    if module_name.endswith(".py") and not os.path.isfile(module_name):
        raise ValueError(f"--model names a module file that does not exist. Received: "
                         f"--model={spec!r}. Check the path.")


def _load_saved_model(path):
    import keras

    try:
        # Not compiled: the planner counts the slots of --optimizer, not the saved one's.
        return keras.saving.load_model(path, compile=False)
    except Exception as error:  # a file Keras cannot read may raise anything
        raise ValueError(f"--model: Keras could not load the saved model: "
                         f"{type(error).__name__}: {error}. Received: --model={path!r}. "
                         "A model with custom layers needs MODULE:FUNCTION instead.") from error


def _check_saved_format(path):
    """Raises `ValueError` unless the file at `path` is what its suffix says: a zip (.keras)
    or an HDF5 file (.h5). Keras says "File not found" for either."""
    keras_file = path.endswith(".keras")
    try:
        with open(path, "rb") as f:
            head = f.read(8)
        readable = zipfile.is_zipfile(path) if keras_file else head == _HDF5_SIGNATURE
    except OSError as error:
        raise ValueError(f"--model names a saved model this process cannot read: "
                         f"{error.strerror}. Received: --model={path!r}. Check its "
                         "permissions.") from None
    if not readable:
        kind = "a zip archive, as .keras files are" if keras_file else "an HDF5 file"
        raise ValueError(f"--model names a file that could not be read as a Keras model: it "
                         f"is not {kind} (it starts with {head!r}). Received: --model="
                         f"{path!r}. Save the model again with model.save({path!r}), or give "
                         "MODULE:FUNCTION.")


def _check(args):
    check_model_spec(args.model)
    for flag, value in (("--global_batch_size", args.global_batch_size),
                        ("--workers", args.workers), ("--devices", args.devices),
                        ("--sequence_length", args.sequence_length)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be at least 1. Received: {flag}={value}")
    if args.interconnect.lower() not in interconnect_lib.INTERCONNECTS:
        raise ValueError(f"--interconnect must be one of "
                         f"{', '.join(interconnect_lib.INTERCONNECTS)}. "
                         f"Received: --interconnect={args.interconnect!r}")
    interconnect_lib.resolve_interconnect(args.interconnect, bandwidth=args.bandwidth,
                                          latency=args.latency)
    if args.device_memory is not None:
        inputs.parse_size(args.device_memory, name="--device_memory")
    if args.optimizer.strip().lower() not in inputs.OPTIMIZER_SLOTS:
        raise ValueError(f"--optimizer must be one of {', '.join(sorted(inputs.OPTIMIZER_SLOTS))}"
                         f". Received: --optimizer={args.optimizer!r}."
                         f"{parsing.did_you_mean(args.optimizer.lower(), inputs.OPTIMIZER_SLOTS)}")
    if args.device_throughput is not None and args.compute_seconds is not None:
        raise ValueError("Pass one of --device_throughput and --compute_seconds. Received: "
                         f"--device_throughput={args.device_throughput:g}, "
                         f"--compute_seconds={args.compute_seconds:g}")
    for flag, value in (("--device_throughput", args.device_throughput),
                        ("--compute_seconds", args.compute_seconds)):
        if value is not None and not value > 0:
            raise ValueError(f"{flag} must be positive. Received: {flag}={value:g}")
    if args.epoch_examples is not None and not args.epoch_examples >= 1:
        raise ValueError("--epoch_examples must be at least 1. "
                         f"Received: --epoch_examples={args.epoch_examples}")
    if not args.epoch_overhead >= 0:
        raise ValueError("--epoch_overhead must be 0 or more. "
                         f"Received: --epoch_overhead={args.epoch_overhead:g}")
    if args.epoch_overhead and args.epoch_examples is None:
        raise ValueError("--epoch_overhead needs --epoch_examples. "
                         f"Received: --epoch_overhead={args.epoch_overhead:g}")
    step_model.check_jitter(args.jitter, name="--jitter")
    if args.schedule.lower() not in step_model.SCHEDULES:
        raise ValueError(f"--schedule must be one of {', '.join(step_model.SCHEDULES)}. "
                         f"Received: --schedule={args.schedule!r}")


def plan_command(args):
    try:
        _check(args)
        native_logs.setup_logging()  # before the model's module loads TensorFlow
        model = load_model(args.model)
        from mgpu_tf.planner import recommend

        result = recommend.plan(
            model, devices=args.devices, device_memory=args.device_memory,
            global_batch_size=args.global_batch_size, optimizer=args.optimizer,
            workers=args.workers, interconnect=args.interconnect, bandwidth=args.bandwidth,
            latency=args.latency, measure_compute=not args.no_measure,
            compute_seconds=args.compute_seconds, device_throughput=args.device_throughput,
            schedule=args.schedule, jitter=args.jitter, epoch_examples=args.epoch_examples,
            epoch_overhead=args.epoch_overhead, sequence_length=args.sequence_length)
    except (ValueError, TypeError) as error:
        print(f"mgpu-tf plan: {error.args[0] if error.args else error}", file=sys.stderr)
        return 1 if type(error).__name__ == "PlanError" else 2
    print(json.dumps(result.as_dict(), indent=1) if args.json else result)
    return 0
