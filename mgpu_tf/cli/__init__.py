"""The `mgpu-tf` command: one entry point, one module per sub-command.

`app` holds the top-level parser and `main`; `launch`, `env`, `k8s`, `calibrate`,
`bench` and `plan` each add their sub-command (`add_parser`) and run it
(`NAME_command`); `parsing` is what their parsers share. Nothing here imports
TensorFlow until a command needs it.
"""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
