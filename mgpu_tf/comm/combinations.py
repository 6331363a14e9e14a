"""What holds when a user combines a strategy with Keras' and the toolkit's options.

Each factor a user sets has a few levels; `outcome(cell)` says, for one combination, whether
training matches one device, matches it to the rounding of a lower precision, draws its own
random numbers, or is refused (with the reason the product's refusal gives). `refuse` is that
refusal; `table()` is the docs' table.

Design: docs/concepts.md#what-a-combination-gives
"""

import dataclasses

from mgpu_tf.base import registry
from mgpu_tf.base.choice import Choice
from mgpu_tf.comm import options as _communication  # noqa: F401 - declares the toolkit options

__all__ = ["Outcome", "Rule", "FACTORS", "PLAIN", "RULES", "TOOLKIT_OPTIONS", "check_fit",
           "PER_REPLICA_BATCH_NORM", "PIPELINE_BATCH_NORM", "OPTIMIZERS", "DEFAULT_PATH",
           "deciding_rule", "level_of", "optimizer_levels", "outcome", "reason", "refuse",
           "table", "write_table"]


class Outcome(Choice):
    """What training under a combination gives, compared with one device."""

    MATCHES = "matches one device"
    ROUNDING = "matches to the rounding of a lower precision"
    RANDOM = "random: same distribution, not the same draws"
    PER_REPLICA = "normalises each replica's rows with their own statistics"
    REFUSED = "refused"


# Each factor's levels; the first is what a user gets without setting it.
FACTORS = {
    "strategy": ("default", "mirrored", "multi_worker", "multi_worker_tcp", "model_parallel",
                 "hybrid"),
    "clipping": ("none", "clipnorm", "global_clipnorm", "clipvalue"),
    "weight_decay": (False, True),
    "use_ema": (False, True),
    "gradient_accumulation_steps": (1, 2),
    "loss_scale_factor": (None, 4.0),
    "precision": ("float32", "mixed_float16"),
    "jit_compile": (False, True),
    "steps_per_execution": (1, 2),
    "steps_per_sync": (1, 2),
    "compression": ("none", "float16"),
    "shard_optimizer_state": (False, True),
    "layer": ("dense", "batch_norm", "dropout", "embedding"),
    "data": ("plain", "validation", "class_weight", "sample_weight"),
    "callback": ("none", "DataOrder", "TrainingMonitor", "BackupAndRestore"),
}
PLAIN = {name: levels[0] for name, levels in FACTORS.items()}

# The toolkit's options among the factors: where each applies is its declaration's.
TOOLKIT_OPTIONS = ("steps_per_sync", "compression", "shard_optimizer_state")
_STRATEGY_KIND = {"multi_worker_tcp": "multi_worker"}
_DATA_PARALLEL = ("mirrored", "multi_worker", "multi_worker_tcp")
_PIPELINES = ("model_parallel", "hybrid")


@dataclasses.dataclass(frozen=True)
class Rule:
    """Combinations (every factor named in `when` at one of its levels) and what they give."""

    when: dict
    outcome: Outcome
    reason: str

    def holds(self, cell):
        return all(level_of(name, cell.get(name, PLAIN.get(name))) in levels
                   for name, levels in self.when.items())


def level_of(factor, value):
    """The level of `factor` a value a user set stands for (`gradient_accumulation_steps=4`
    is the level `2`: accumulating)."""
    if factor not in FACTORS:  # the optimizer's class name: its own level
        return value
    levels = FACTORS[factor]
    if value in levels and type(value) is type(levels[-1]) or isinstance(value, str):
        return value
    if levels == (False, True):
        return bool(value)
    if levels[0] is None:
        return levels[0] if value is None else levels[-1]
    return levels[-1] if value and value > levels[0] else levels[0]


def optimizer_levels(optimizer):
    """The levels of the Keras optimizer factors a (compiled) Keras optimizer is at."""
    while hasattr(optimizer, "inner_optimizer"):  # LossScaleOptimizer
        optimizer = optimizer.inner_optimizer
    return {"optimizer": type(optimizer).__name__,
            "gradient_accumulation_steps":
            level_of("gradient_accumulation_steps", optimizer.gradient_accumulation_steps or 1),
            "use_ema": bool(optimizer.use_ema),
            "loss_scale_factor": level_of("loss_scale_factor", optimizer.loss_scale_factor)}


def check_fit(strategy, data, model=None, class_weight=None, **_):
    """Raises `ValueError` when `fit` of the compiled `model` on `data` under `strategy` (a
    kind's name) is a refused combination; takes `fit`'s arguments as the fit hook passes
    them to a kind's `prepare_fit`."""
    import tensorflow as tf

    from mgpu_tf.compat import private

    if model is None:
        return
    distributed = isinstance(data, tf.distribute.DistributedDataset)
    levels = {} if model.optimizer is None else optimizer_levels(model.optimizer)
    if class_weight is not None and distributed:
        refuse(strategy, data="class_weight", **levels)
    for layer in private.nested_layers(model):
        kind = type(layer).__name__
        if kind == "Embedding":
            refuse(strategy, layer="embedding", **levels)
        elif kind == "BatchNormalization" and getattr(layer, "synchronized", False):
            refuse(strategy, layer="batch_norm", jit_compile=model.jit_compile is True,
                   **levels)


RULES = (
    Rule({"gradient_accumulation_steps": (2,), "strategy": _DATA_PARALLEL}, Outcome.REFUSED,
         "Keras' accumulation updates in a `tf.cond` in replica context, where a strategy "
         "cannot all-reduce; `steps_per_sync` accumulates across replicas"),
    Rule({"data": ("class_weight",), "strategy": _DATA_PARALLEL}, Outcome.REFUSED,
         "Keras applies `class_weight` by mapping a `tf.data.Dataset`, which a distributed "
         "data set (`shard_dataset`'s) is not; put the weights in the examples, "
         "(x, y, sample_weight), before `shard_dataset`"),
    Rule({"layer": ("batch_norm",), "jit_compile": (True,), "strategy": _DATA_PARALLEL},
         Outcome.REFUSED,
         "synchronized BatchNormalization all-reduces the batch's statistics in the forward "
         "pass, which XLA compiles per replica, where no all-reduce can run; compile with "
         "jit_compile=False"),
    Rule({"layer": ("batch_norm",), "strategy": _PIPELINES}, Outcome.REFUSED,
         "BatchNormalization normalises over the whole batch, micro-batches over their own "
         "rows: `ModelParallel` asks for `deferred_batch_norm=True` (GPipe's semantics)"),
    Rule({"layer": ("embedding",), "loss_scale_factor": (4.0,)}, Outcome.REFUSED,
         "Keras divides every gradient by `loss_scale_factor`, and an Embedding's sparse one "
         "(`tf.IndexedSlices`) does not divide: Keras fails on one device too"),
    Rule({"steps_per_sync": (2,), "loss_scale_factor": (4.0,)}, Outcome.REFUSED,
         "the update after accumulating gradients scaled by `loss_scale_factor` differs from "
         "one device's (7% of the weights' size in a 4-step test); `precision` "
         "'mixed_float16' scales the loss with steps_per_sync"),
    Rule({"shard_optimizer_state": (True,), "use_ema": (True,)}, Outcome.REFUSED,
         "the moving averages of `use_ema` are whole-size state, which sharding would keep "
         "whole on every replica"),
    Rule({"shard_optimizer_state": (True,), "gradient_accumulation_steps": (2,)},
         Outcome.REFUSED,
         "Keras' gradient accumulators are whole-size state, which sharding would keep whole "
         "on every replica; `steps_per_sync` accumulates without them"),
    Rule({"optimizer": ("ScheduleFreeAdamW",), "strategy": _DATA_PARALLEL}, Outcome.REFUSED,
         "Keras' ScheduleFreeAdamW trains far from one device under tf.distribute's data "
         "parallelism (weights 1 to 50 times their size apart after 4 steps, mirrored and "
         "multi_worker alike), a difference not yet traced to its cause; use AdamW, or "
         "model_parallel, whose optimizer runs once per step on the whole gradient"),
    Rule({"precision": ("mixed_float16",)}, Outcome.ROUNDING,
         "float16 computation: the one-device run rounds the same products in another order"),
    Rule({"compression": ("float16",)}, Outcome.ROUNDING,
         "gradients cross the wire, and are summed, in float16"),
    Rule({"layer": ("dropout",), "strategy": (*_DATA_PARALLEL, *_PIPELINES)},
         Outcome.RANDOM,
         "each replica (hybrid: each worker; model_parallel: each micro-batch) draws its "
         "own mask for its rows, where one device draws one mask for the whole batch: the "
         "same distribution, other draws"),
)


# What holds outside the matrix's levels, each with a named test of its own (its `when`
# names a level no factor has): a BatchNormalization layer as Keras makes it.
PER_REPLICA_BATCH_NORM = Rule(
    {"layer": ("batch_norm_per_replica",), "strategy": _DATA_PARALLEL}, Outcome.PER_REPLICA,
    "Keras' `BatchNormalization()` (synchronized=False) normalises each replica's rows with "
    "their own mean and variance, as under `tf.distribute` without the toolkit; the moving "
    "statistics are averaged over replicas after each step. `make_strategy(..., "
    "sync_batch_norm=True)` normalises with the global batch's, as one device")


# Keras' BatchNormalization under a pipeline: refused by ModelParallel, as for the matrix's
# synchronized layer.
PIPELINE_BATCH_NORM = Rule(
    {"layer": ("batch_norm_per_replica",), "strategy": _PIPELINES}, Outcome.REFUSED,
    "BatchNormalization normalises over the whole batch, micro-batches over their own rows: "
    "`ModelParallel` asks for `deferred_batch_norm=True` (GPipe's semantics)")

# The default path, in full: each strategy with its default options (multi_worker's transport
# "auto" takes the tcp ring between CPU workers), every Keras optimizer, and each layer kind
# as Keras makes it; every cell is trained (tests/test_combinations.py).
OPTIMIZERS = ("SGD", "Adam", "AdamW", "Adamax", "Adadelta", "Adagrad", "Adafactor", "Ftrl",
              "Lamb", "Lion", "Nadam", "RMSprop", "Muon", "ScheduleFreeAdamW")
DEFAULT_PATH = {
    "strategy": ("mirrored", "multi_worker_tcp", "model_parallel", "hybrid"),
    "optimizer": OPTIMIZERS,
    "layer": ("dense", "embedding", "batch_norm_per_replica", "dropout"),
}


def _applies(option, strategy):
    kind = _STRATEGY_KIND.get(strategy, strategy)
    return kind in registry.option(option).strategies


def _option_refusal(cell):
    for option in TOOLKIT_OPTIONS:
        value = cell.get(option, PLAIN[option])
        if value != PLAIN[option] and not _applies(option, cell.get("strategy", "default")):
            takers = ", ".join(registry.option(option).strategies)
            return Rule({option: (value,), "strategy": (cell["strategy"],)}, Outcome.REFUSED,
                        f"`{option}` is an option of {takers} only")
    return None


def deciding_rule(cell):
    """The `Rule` that decides `cell` (a refusal first, then randomness, then precision), or
    `None` when it matches one device."""
    refusal = _option_refusal(cell)
    if refusal is not None:
        return refusal
    held = [rule for rule in (*RULES, PER_REPLICA_BATCH_NORM, PIPELINE_BATCH_NORM)
            if rule.holds(cell)]
    for wanted in (Outcome.REFUSED, Outcome.PER_REPLICA, Outcome.RANDOM, Outcome.ROUNDING):
        for rule in held:
            if rule.outcome == wanted:
                return rule
    return None


def outcome(cell):
    """What training under `cell` (factor name to level; others plain) gives: an `Outcome`."""
    rule = deciding_rule(cell)
    return Outcome.MATCHES if rule is None else rule.outcome


def reason(cell):
    """The reason of `cell`'s outcome, `""` when it matches one device."""
    rule = deciding_rule(cell)
    return "" if rule is None else rule.reason


def refuse(strategy, **levels):
    """Raises `ValueError`, naming the combination and why, when the declarations refuse
    `levels` (factor to level) under `strategy` (a level of the `strategy` factor).

    The product's refusals call it where they see the combination (`compile`, through the
    strategy kind's `prepare_optimizer`), so they say what the table says.
    """
    cell = {name: level_of(name, value) for name, value in levels.items()}
    cell["strategy"] = strategy
    rule = deciding_rule(cell)
    if rule is None or rule.outcome != Outcome.REFUSED:
        return
    named = ", ".join(f"{name}={levels[name]!r}" for name in rule.when if name != "strategy")
    raise ValueError(f"{named} is refused under strategy {strategy!r}: {rule.reason}. "
                     f"Received: {named}.")


_SHOWN = {"batch_norm": "`BatchNormalization(synchronized=True)`", "dropout": "`Dropout`",
          "embedding": "`Embedding`", "class_weight": "`class_weight`",
          "validation": "validation data", "sample_weight": "`sample_weight`"}


def _condition(name, level):
    if (name, level) == ("layer", "batch_norm_per_replica"):
        return "`BatchNormalization()`"
    if name in ("layer", "data", "callback"):
        return _SHOWN.get(level, f"`{level}`")
    if name == "strategy":
        return "`multi_worker` (tcp)" if level == "multi_worker_tcp" else f"`{level}`"
    if isinstance(level, int) and not isinstance(level, bool) and level > 1:
        return f"`{name}>1`"
    return f"`{name}={level!r}`" if not isinstance(level, str) else f"`{name}='{level}'`"


def _combination(when):
    parts = [" or ".join(_condition(name, level) for level in levels)
             for name, levels in when.items() if name != "strategy"]
    text = " with ".join(parts)
    if "strategy" in when:
        text += " under " + ", ".join(_condition("strategy", s) for s in when["strategy"])
    return text


def table():
    """The docs' table of combinations, in Markdown: each rule, and where each option applies."""
    rows = ["| combination | what training gives | why |", "| --- | --- | --- |",
            "| any other, in float32 | matches one device | the same sums in another order: "
            "float32 rounding |"]
    for rule in (*RULES, PER_REPLICA_BATCH_NORM, PIPELINE_BATCH_NORM):
        rows.append(f"| {_combination(rule.when)} | {rule.outcome.value} | {rule.reason} |")
    for option in TOOLKIT_OPTIONS:
        others = tuple(s for s in FACTORS["strategy"] if not _applies(option, s))
        when = {option: (FACTORS[option][-1],), "strategy": others}
        rows.append(f"| {_combination(when)} | refused by `make_strategy` | `{option}` is an "
                    f"option of {', '.join(registry.option(option).strategies)} only |")
    return "\n".join(rows) + "\n"


_BEGIN = "<!-- combinations table: python -m mgpu_tf.comm.combinations -->"
_END = "<!-- end of combinations table -->"


def write_table(path):
    """Writes `table()` between the markers of the Markdown file at `path`; returns True if it
    changed."""
    with open(path, encoding="utf-8") as file:
        text = file.read()
    head, begin, rest = text.partition(_BEGIN)
    _, end, tail = rest.partition(_END)
    if not begin or not end:
        raise ValueError(f"{path} must hold the markers {_BEGIN!r} and {_END!r}. "
                         f"Received: a file without them.")
    new = f"{head}{_BEGIN}\n{table()}{_END}{tail}"
    with open(path, "w", encoding="utf-8") as file:
        file.write(new)
    return new != text


if __name__ == "__main__":
    import pathlib

    write_table(pathlib.Path(__file__).resolve().parents[2] / "docs" / "concepts.md")
