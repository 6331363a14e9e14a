"""What the scaling benchmark runs: the model, and the settings it is trained under.

Design: docs/design.md#the-scaling-benchmark
"""

import dataclasses

__all__ = ["MODELS", "ModelSpec", "Setting", "default_settings", "switched"]

# The settings that get a twin with Keras' speed switches on, when they are asked for:
# the baseline, one machine's replicas, plain and default workers and their best options.
SWITCHED = ("processN", "mirrored", "workers", "workers-default", "workers-tcp",
            "workers-float16-steps4", "workers-tcp-float16-steps4", "model_parallel")

# The models the benchmark trains: a communication-bound MLP and a compute-bound CNN.
MODELS = ("mlp", "cnn")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """The benchmark's model: an MLP, or a CNN.

    `"mlp"`: `features` inputs, `depth` Dense layers (`width` units, then `classes`).
    `"cnn"`: `image` x `image` x `channels` inputs, a 3x3 Conv2D (ReLU) of each of `filters`
    (the first two at full size, each later one after a 2x2 max pooling), global average
    pooling, a Dense of `classes`.
    """

    features: int = 784
    width: int = 1024
    depth: int = 4
    classes: int = 10
    kind: str = "mlp"
    image: int = 32
    channels: int = 3
    filters: tuple = (32, 64, 128)

    def __post_init__(self):
        if self.kind not in MODELS:
            raise ValueError(f"`kind` must be one of {', '.join(MODELS)}. Received: "
                             f"kind={self.kind!r}")
        object.__setattr__(self, "filters", tuple(self.filters))  # JSON gives a list

    @property
    def input_shape(self):
        """One example's shape."""
        if self.kind == "cnn":
            return (self.image, self.image, self.channels)
        return (self.features,)

    @property
    def label(self):
        """The model in a few words, for the header of the table."""
        if self.kind == "cnn":
            return (f"CNN {self.image}x{self.image}x{self.channels}, Conv2D "
                    f"{'/'.join(map(str, self.filters))}")
        return f"MLP {self.depth} x {self.width}"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One way of running the benchmark.

    Args:
        key: short identifier, for `mgpu-tf bench --only`; `name`: label for the table.
        mode: `"process"` (default strategy), `"mirrored"`, `"workers"` (multi_worker) or
            `"model_parallel"`.
        count: devices, workers or stages; `threads`: TensorFlow threads per process.
        global_batch: examples per step over all replicas.
        options: extra `make_strategy` arguments, as `(name, value)` pairs.
        defaults: `make_strategy` gets `options` alone, as a user writes it; else workers
            without a `transport` take TensorFlow's collectives.
        compile: extra `model.compile` arguments, as `(name, value)` pairs.
        group: the row of the plot the setting belongs to.
        base: for a setting with the speed switches on, the key of its twin without.
    """

    key: str
    name: str
    mode: str
    count: int
    threads: int
    global_batch: int
    options: tuple = ()
    group: str = ""
    compile: tuple = ()
    base: str = ""
    defaults: bool = False

    @classmethod
    def from_dict(cls, data):
        """The setting `dataclasses.asdict` gave `data` for (JSON makes pairs lists)."""
        pairs = {name: tuple(tuple(o) for o in data.get(name, ())) for name in
                 ("options", "compile")}
        return cls(**{**data, **pairs})


# (key, label after "N workers", make_strategy options) of each multi_worker setting.
_WORKER_OPTIONS = [
    ("workers", " TensorFlow collectives", ()),
    ("workers-float16", " float16", (("compression", "float16"),)),
    ("workers-bfloat16", " bfloat16", (("compression", "bfloat16"),)),
    ("workers-packs", " 1 MB packs", (("bytes_per_pack", 1 << 20),)),
    ("workers-overlap", " 4 MB packs, last layer first",
     (("bytes_per_pack", 4 << 20), ("overlap", True))),
    ("workers-steps4", " steps_per_sync=4", (("steps_per_sync", 4),)),
    ("workers-float16-steps4", " float16, steps_per_sync=4",
     (("compression", "float16"), ("steps_per_sync", 4))),
    ("workers-mixed_bfloat16", " mixed_bfloat16", (("precision", "mixed_bfloat16"),)),
    ("workers-tcp", " transport=tcp", (("transport", "tcp"),)),
    ("workers-tcp-float16", " tcp, float16", (("transport", "tcp"), ("compression", "float16"))),
    ("workers-tcp-steps4", " tcp, steps_per_sync=4",
     (("transport", "tcp"), ("steps_per_sync", 4))),
    ("workers-tcp-float16-steps4", " tcp, float16, steps_per_sync=4",
     (("transport", "tcp"), ("compression", "float16"), ("steps_per_sync", 4))),
]


def switched(settings, *, jit_compile=True, steps_per_execution=8):
    """Each setting of `SWITCHED` among `settings`, again with Keras' speed switches on.

    A twin's key is its setting's with `+switches`; its speed-up is against its own setting.
    """
    label = f"jit_compile={jit_compile}, steps_per_execution={steps_per_execution}"
    return [dataclasses.replace(
        s, key=f"{s.key}+switches", name=f"{s.name}; {label}", group=f"{s.group} +switches",
        compile=(("jit_compile", jit_compile), ("steps_per_execution", steps_per_execution)),
        base=s.key) for s in settings if s.key in SWITCHED]


def default_settings(n=2, *, global_batch=256, model_parallel=True):
    """The `Setting`s `mgpu-tf bench` runs to compare `n` devices, workers and stages with one.

    `model_parallel` adds the `n`-stage pipeline.
    """
    b = global_batch
    settings = [
        Setting("process1", "1 process x 1 thread", "process", 1, 1, b, group="devices"),
        Setting("processN", f"1 process x {n} threads", "process", 1, n, b, group="process"),
        Setting("compute", f"1 thread, batch {b // n}", "process", 1, 1, b // n,
                group="compute"),
        Setting("worker1", f"1 worker, batch {b // n}", "workers", 1, 1, b // n,
                group="compute-worker"),
        Setting("mirrored", f"{n} simulated devices", "mirrored", n, n, b, group="devices"),
        # make_strategy("multi_worker") as a user writes it: transport="auto" and all.
        Setting("workers-default", f"{n} workers, default options", "workers", n, 1, b,
                group="workers-default", defaults=True),
        *[Setting(key, f"{n} workers{label}", "workers", n, 1, b, options, group=key)
          for key, label, options in _WORKER_OPTIONS],
        Setting("processN-mixed_bfloat16", f"1 process x {n} threads mixed_bfloat16",
                "process", 1, n, b, (("precision", "mixed_bfloat16"),),
                group="process mixed_bfloat16"),
    ]
    if model_parallel:
        settings.append(Setting("model_parallel", f"{n} stages model_parallel",
                                "model_parallel", n, n, b, (("microbatches", 4),),
                                group="model_parallel"))
    return settings
