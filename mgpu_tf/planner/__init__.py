"""The planner: which parallelism a model wants, before any hardware is booked.

`memory` adds up what each device holds (parameters, gradients, optimizer slots,
traced activations), `interconnect` names the links and their default figures,
`timing` measures a step's compute here, and `recommend` ranks the options by
the seed's rules (`plan`, and the choice `make_strategy("auto", model=...)` makes).
"""

from mgpu_tf.planner.memory import Footprint, format_size, parse_size
from mgpu_tf.planner.recommend import Option, Plan, PlanError, plan

__all__ = ["Footprint", "Option", "Plan", "PlanError", "format_size", "parse_size", "plan"]
