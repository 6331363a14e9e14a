"""What every layer shares: strategy names, option checks, devices and precision.

`registry` holds the strategy names and the table of options (no TensorFlow), `options`
declares the shared options and parses the table once into a frozen `settings.Settings`
before TensorFlow's runtime starts, `devices` lists and splits devices, `precision` the
dtype policy, `choice` the base of the toolkit's enums. Every other folder may import this
package; it imports none of them, nor the root. Plugins register through `registry`.
"""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
