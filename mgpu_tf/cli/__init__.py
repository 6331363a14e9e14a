"""The `mgpu-tf` command: one entry point, one module per sub-command.

`app` holds the top-level parser and `main`; `launch`, `env`, `k8s`, `calibrate`,
`bench` and `plan` each add their sub-command (`add_parser`) and run it
(`NAME_command`); `parsing` is what their parsers share. Nothing here imports
TensorFlow until a command needs it.
"""

from mgpu_tf import lazy_exports

_EXPORTS = {"mgpu_tf.cli.app": "main"}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
