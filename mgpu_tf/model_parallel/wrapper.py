"""`ModelParallel`: a Keras model whose layers are split over devices, GPipe-style.

Design: docs/design.md#the-model-parallel-wrapper
"""

import dataclasses
import logging
import numbers
import warnings

import keras

from mgpu_tf.base import options as options_lib
from mgpu_tf.compat import patches
from mgpu_tf.compat import private
from mgpu_tf.model_parallel import balance as balance_lib
from mgpu_tf.model_parallel import batchnorm
from mgpu_tf.model_parallel import graph as graph_lib
from mgpu_tf.model_parallel import microbatch
from mgpu_tf.model_parallel import pipeline
from mgpu_tf.model_parallel import placement
from mgpu_tf.model_parallel import recompute as recompute_lib
from mgpu_tf.model_parallel import stage as stage_lib
from mgpu_tf.model_parallel import xla

__all__ = ["ModelParallel", "StagePlan", "check_balance", "check_deferred_batch_norm"]

# The Keras patches (compat.patches) a model-parallel model needs.
_PATCHES = ("shuffle", "fit")

logger = logging.getLogger("mgpu_tf")

_TIME_SAMPLE_ROWS = 32

# A layer holding more than this share of a model's bytes bounds any split of it.
_DOMINANT_SHARE = 0.5


@dataclasses.dataclass(frozen=True)
class StagePlan:
    """What one stage holds and where it runs.

    Attributes:
        index, device, layers: the stage number from 0, its device, its layers' names.
        param_bytes: bytes of its variables.
        seconds: forward plus backward seconds measured by `balance="time"`, else `None`.
    """

    index: int
    device: str
    layers: tuple
    param_bytes: int
    seconds: float = None

    def __str__(self):
        seconds = "-" if self.seconds is None else f"{self.seconds * 1e3:.2f} ms"
        count = f"{len(self.layers)} layer{'' if len(self.layers) == 1 else 's'}"
        names = " .. ".join(dict.fromkeys((self.layers[0], self.layers[-1])))
        return (f"stage {self.index} on {self.device}: {count} ({names}), "
                f"{self.param_bytes} bytes, {seconds}")


def check_balance(value):
    """Returns `balance` normalised: a `Balance`, or a list of positive ints."""
    if isinstance(value, str):
        known = [b.value for b in balance_lib.Balance]
        name = str(value.value if isinstance(value, balance_lib.Balance) else value).lower()
        if name not in known:
            raise ValueError(
                f"`balance` must be one of {', '.join(known)} or a list of layer counts per "
                f"stage. Received: balance={value!r}"
            )
        return balance_lib.Balance(name)
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value):
        if min(value) < 1:
            raise ValueError(
                "Each stage in `balance` needs at least one layer. "
                f"Received: balance={list(value)!r}"
            )
        return [int(v) for v in value]
    raise TypeError(
        "`balance` must be 'uniform', 'params', 'time' or a list of layer counts per "
        f"stage. Received: balance={value!r}"
    )


def check_deferred_batch_norm(value):
    """Returns `value` if it is a bool, else raises a TypeError naming the option."""
    if not isinstance(value, bool):
        raise TypeError("`deferred_batch_norm` must be True or False. "
                        f"Received: deferred_batch_norm={value!r}")
    return value


class ModelParallel(keras.Model):
    """Places consecutive layers of a Keras model on several devices and pipelines them.

    Balance, micro-batches, recomputation and BatchNormalization are explained in
    docs/concepts.md.

    Example:

    ```python
    mgpu_tf.simulate_devices(2)
    model = mgpu_tf.ModelParallel(model, ["CPU:0", "CPU:1"], microbatches=4)
    model.compile(optimizer="adam", loss="mse")
    print(*model.plan, sep="\n")
    ```

    Args:
        model: a built Sequential or functional model (nested ones are opened into their
            layers; any inputs and outputs), or an unbuilt Sequential with `input_shape`.
        devices: device names, one per stage, or a number of local devices.
        balance: `"uniform"`, `"params"`, `"time"` or a list of layer counts per stage,
            counting the layer calls of the flattened model. Defaults to `"params"`.
        microbatches: micro-batches per batch (the last may be shorter). Defaults to `1`.
        sample: inputs for `balance="time"`, as the model takes them. Defaults to 32 rows
            of zeros.
        input_shape: the input shape, batch axis included, to build an unbuilt model.
        recompute: `"never"`, `"except_last"` or `"always"`: which micro-batches keep
            only each stage's input and recompute the rest backward. Defaults to `"never"`.
        deferred_batch_norm: with micro-batches, update BatchNormalization's moving
            statistics once per step from the whole batch. Defaults to `False`.

    Raises:
        TypeError: for a subclassed model or options of the wrong type.
        ValueError: for more stages than layers, a missing device, a bad balance,
            BatchNormalization with micro-batches and no `deferred_batch_norm`, or a model
            that cannot be built.
    """

    def __init__(self, model, devices, *, balance="params", microbatches=1, sample=None,
                 input_shape=None, recompute="never", deferred_batch_norm=False, **kwargs):
        balance = check_balance(balance)
        microbatches = microbatch.check_microbatches(microbatches)
        recompute = recompute_lib.check_recompute(recompute)
        deferred_batch_norm = check_deferred_batch_norm(deferred_batch_norm)
        devices = options_lib.check_devices("model_parallel", devices)
        if not isinstance(model, keras.Model):
            raise TypeError(f"`model` must be a Keras model. Received: model={model!r}")
        _build(model, input_shape)
        graph = graph_lib.flatten(model)
        _check_stages(graph, balance, devices)
        _check_batch_coupling(model, microbatches, deferred_batch_norm)
        counts, seconds = _counts(graph, balance, len(devices), sample)
        super().__init__(name=kwargs.pop("name", f"model_parallel_{model.name}"), **kwargs)
        # What it trains under is TensorFlow's default strategy: the patches of no strategy
        # reach it, so it installs its own (fit's shuffle for shard_dataset's data).
        patches.install(*_PATCHES)
        self.supports_jit = False  # one XLA cluster cannot span devices
        self._model = model
        self._graph = graph
        self._cut = stage_lib.cut(graph, counts)
        self._compiled_stages = None  # the stages under XLA, once compile(jit_compile=True)
        self._devices = tuple(devices)
        self._microbatches = microbatches
        self._recompute = recompute
        self._deferred = None
        if deferred_batch_norm and microbatches > 1:
            self._deferred = batchnorm.DeferredBatchNorm(batchnorm.batch_norm_layers(model))
        self._plan = _plan(graph, counts, devices, seconds)
        _log_cut(model.name, self._plan, balance, microbatches)
        _warn_dominant_layer(model.name, graph, len(devices))
        # A layer called by several stages (a tied embedding) lives with the first; the
        # later ones read its variables across devices.
        placed = set()
        for stage, device in zip(self._cut.stages, self._devices):
            layers = [layer for layer in stage.layers if id(layer) not in placed]
            placed.update(id(layer) for layer in layers)
            placement.place_variables(layers, device)
        self._variable_devices = {
            id(v.value): placement.device_of(v) for v in model.weights}

    @property
    def plan(self):
        """A list of `StagePlan`, one per stage."""
        return list(self._plan)

    @property
    def devices(self):
        """The device of each stage."""
        return self._devices

    @property
    def microbatches(self):
        """How many micro-batches each batch is split into."""
        return self._microbatches

    @property
    def recompute(self):
        """Which micro-batches are recomputed in the backward pass: a `Recompute`."""
        return self._recompute

    @property
    def deferred_batch_norm(self):
        """Whether BatchNormalization's moving statistics are updated once per step."""
        return self._deferred is not None

    @property
    def model(self):
        """The wrapped Keras model (what `save` writes)."""
        return self._model

    @property
    def graph(self):
        """The `graph.FlatGraph` it cuts: the model's layer calls, nested models opened."""
        return self._graph

    @property
    def stages(self):
        """The `stage.Cut`: what each stage runs, reads and hands on."""
        return self._cut

    def call(self, inputs, training=None):
        runners = self._compiled_stages or self._cut.stages
        flat = stage_lib.bind_inputs(self._graph, inputs)
        if not training or self._deferred is None:
            outputs = pipeline.run_pipeline(self._cut, runners, self._devices, flat,
                                            self._microbatches, bool(training), self._recompute)
        else:
            with self._deferred.recording():
                outputs = pipeline.run_pipeline(self._cut, runners, self._devices, flat,
                                                self._microbatches, True, self._recompute,
                                                self._deferred.paused)
            self._deferred.update()
        return stage_lib.pack_outputs(self._graph, outputs)

    def compile(self, optimizer="rmsprop", *args, jit_compile="auto", **kwargs):
        """Configures training as `keras.Model.compile` does.

        `jit_compile=True` compiles each piece of each stage on its own device (an XLA cluster
        cannot span devices).
        """
        if jit_compile not in (True, False, "auto"):
            raise ValueError("`jit_compile` must be True, False or 'auto'. "
                             f"Received: jit_compile={jit_compile!r}")
        if jit_compile is True and self._deferred is not None:
            raise ValueError(
                "deferred_batch_norm=True records each micro-batch's statistics between "
                "the stages' calls, which XLA-compiled stages do not show. Received: "
                "jit_compile=True with deferred_batch_norm=True. Use jit_compile=False.")
        self._compiled_stages = (xla.compiled_stages(self._cut.stages, self._devices)
                                 if jit_compile is True else None)
        super().compile(optimizer, *args, jit_compile=False, **kwargs)
        placement.place_optimizer(self.optimizer, self._variable_devices)
        # The wrapped model shares the optimizer, so what `save` writes can resume training.
        self._model.compile(self.optimizer, *args, jit_compile=False, **kwargs)

    def save(self, filepath, *args, **kwargs):
        """Saves the wrapped model: the file loads as a plain Keras model."""
        return self._model.save(filepath, *args, **kwargs)

    def save_weights(self, filepath, *args, **kwargs):
        return self._model.save_weights(filepath, *args, **kwargs)

    def load_weights(self, filepath, *args, **kwargs):
        return self._model.load_weights(filepath, *args, **kwargs)


def _check_stages(graph, balance, devices):
    stages = len(devices)
    units = len(graph.units)
    if stages > 1 and units == 1:
        layer = graph.units[0].operation
        raise ValueError(
            f"ModelParallel cannot cut {type(layer).__name__} {layer.name!r}: it is the "
            "model's one layer, and a subclassed layer or model has no layer graph to "
            f"cut. Received: {stages} devices. Build the model with the functional API from "
            "its blocks, or use one device, or a data-parallel strategy.")
    if stages > units:
        raise ValueError(
            f"There are more stages ({stages}, one per device) than "
            f"layers ({units}). Received: devices={devices!r}. "
            f"Use at most {units} devices."
        )
    if isinstance(balance, list) and (len(balance) != stages or sum(balance) != units):
        raise ValueError(
            f"`balance` must give a layer count for each of the {stages} stages, "
            f"adding up to the model's {units} layers. Received: "
            f"balance={balance!r} (sum {sum(balance)}, {len(balance)} stages). "
            "Or pass balance='params' or 'time' to balance automatically."
        )
    if isinstance(balance, list):
        stage_lib.check_masks(graph, balance)
    elif len(graph.atoms()) < stages:
        raise ValueError(
            f"The model can be cut into at most {len(graph.atoms())} stages where no tensor "
            f"carrying a Keras mask crosses a cut, fewer than the {stages} devices. "
            f"Received: devices={devices!r}. Use fewer devices.")
    if any(key in graph.masked for key in graph.outputs):
        raise ValueError(
            "ModelParallel returns its outputs without Keras masks, which Keras' losses "
            "would read. Received: a model whose output carries a mask. Compute the mask "
            "into the output (or a sample weight) instead.")


def _check_batch_coupling(model, microbatches, deferred_batch_norm):
    coupled = microbatch.batch_coupled_layers(model)
    if microbatches > 1 and coupled and not deferred_batch_norm:
        named = ", ".join(map(repr, coupled[:3])) + (", ..." if len(coupled) > 3 else "")
        raise ValueError(
            "Batch-coupled layers compute statistics over the whole batch, so with "
            "micro-batches they would train differently from the unsplit batch. "
            f"Received: microbatches={microbatches} with {len(coupled)} BatchNormalization "
            f"layer{'s' * (len(coupled) != 1)} ({named}). "
            "Pass deferred_batch_norm=True to normalise each micro-batch with its own "
            "statistics and update the moving statistics once per step from the whole "
            "batch (GPipe's batch normalisation), or use microbatches=1, or "
            "LayerNormalization/GroupNormalization instead."
        )
    if deferred_batch_norm and microbatches > 1:
        batchnorm.DeferredBatchNorm(batchnorm.batch_norm_layers(model))  # refuses renorm


def _counts(graph, balance, stages, sample):
    """Returns (layers per stage, measured seconds per layer or None)."""
    if balance == "uniform":
        return balance_lib.balance_by_uniform(graph, stages), None
    if balance == "params":
        return balance_lib.balance_by_params(graph, stages), None
    if balance == "time":
        return balance_lib.balance_by_time(
            graph, stages, balance_lib.sample_inputs(graph, sample, _TIME_SAMPLE_ROWS))
    return balance, None


def _build(model, input_shape):
    sequential = isinstance(model, keras.Sequential)
    if model.built and (not sequential or private.sequential_graph(model) is not None):
        return
    if input_shape is None:
        raise ValueError(
            "ModelParallel needs a built model, to know its layers' shapes and weights; "
            f"this one is not built and no input shape was given. Received: model={model.name!r}, "
            "input_shape=None. Start the model with keras.Input(shape), or pass "
            "input_shape=(None, ...)."
        )
    try:
        model.build(tuple(input_shape))
    except Exception as error:  # Keras raises many types while building
        raise ValueError(
            f"ModelParallel could not build the model with input_shape={tuple(input_shape)!r}: "
            f"{error}. Received: model={model.name!r}. Build it yourself and pass it built."
        ) from error
    if sequential and private.sequential_graph(model) is None:
        raise ValueError(
            "ModelParallel could not build a layer graph for the model. Received: "
            f"model={model.name!r}. Start it with keras.Input(shape)."
        )


def _plan(graph, counts, devices, seconds):
    plans, start = [], 0
    for index, (count, device) in enumerate(zip(counts, devices)):
        units = graph.units[start:start + count]
        plans.append(StagePlan(
            index=index, device=device, layers=tuple(u.name for u in units),
            param_bytes=sum(u.param_bytes for u in units),
            seconds=None if seconds is None else float(sum(seconds[start:start + count]))))
        start += count
    return tuple(plans)


def _log_cut(name, plan, balance, microbatches):
    """Says how the model was cut, as `auto` and sharding say what they chose."""
    if isinstance(balance, balance_lib.Balance):
        balance = balance.value
    layers = " + ".join(str(len(stage.layers)) for stage in plan)
    param_bytes = " + ".join(str(stage.param_bytes) for stage in plan)
    devices = ", ".join(stage.device for stage in plan)
    logger.info("mgpu_tf: ModelParallel cut %r into %d stages (balance=%r, %d micro-batches): "
                "%s layers on %s, %s bytes.", name, len(plan), balance, microbatches,
                layers, devices, param_bytes)


def _warn_dominant_layer(name, graph, stages):
    """Warns when no cut can balance the stages because one layer made of layers holds most
    of the bytes (a subclassed encoder holding every block)."""
    found = graph_lib.dominant_unit(graph, _DOMINANT_SHARE) if stages > 1 else None
    if found is not None:
        unit, share = found
        warnings.warn(
            f"ModelParallel cannot balance {name!r} over {stages} stages: layer {unit.name!r} "
            f"({type(unit.operation).__name__}) holds {share:.0%} of its bytes "
            f"({unit.param_bytes} of {graph.param_bytes()}) in layers of its own, which a "
            "subclassed layer gives no graph to cut between. Build the model from that "
            "layer's blocks with the functional API so they can be cut apart, or use fewer "
            "stages, or a data-parallel strategy.", stacklevel=3)
