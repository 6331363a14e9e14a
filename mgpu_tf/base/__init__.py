"""What every layer shares: strategy names, option checks, devices and precision.

`registry` holds the strategy names and the table of options (no TensorFlow), `options`
declares the built-in options and parses them once into a frozen `settings.Settings`
before TensorFlow's runtime starts, `devices` lists and simulates devices,
`precision` the dtype policy. `strategies`, `model_parallel` and `planner` import
this package; it imports none of them. Plugins register through `registry`.
"""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
