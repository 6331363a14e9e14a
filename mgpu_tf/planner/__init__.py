"""The planner: which parallelism a model wants, before any hardware is booked.

`memory` adds up what each device holds (parameters, gradients, optimizer slots,
and the activations `liveness` finds a traced training step keeps alive),
`interconnect` names real links with the bandwidth an all-reduce sees, `speed`
takes a device's speed in the user's units (or times a step here, `timing`),
`step_model` predicts the data-parallel step (compute, the wait for the slowest
device, the all-reduce by schedule) on top of `cost_model`'s ring all-reduce, `epoch`
adds what an epoch costs besides its steps, and
`recommend` ranks the options by the seed's rules (`plan`, whose `result` is a
`Plan`, and the choice `make_strategy("auto", model=...)` makes); `bench/` measures
on this machine what the predictions say (`mgpu-tf bench`).
The names load on first use, so `mgpu-tf plan --help` answers without TensorFlow."""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
