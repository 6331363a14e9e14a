"""Start-up of every process a test starts: a cheaper TensorFlow import, and the recorder.

Python imports `sitecustomize` at start-up; tests/conftest.py puts this folder on the
PYTHONPATH of the processes tests start (the release matrix, noxfile.py, does too). Until
`tensorflow` is imported the cyclic collector runs a hundredth as often: collecting among
the ~400,000 objects that import makes took about 0.8 of its 5.5 s of CPU on a 2-core AMD
EPYC; afterwards no collection walks them. `matplotlib.pyplot`, which Keras imports (0.5 s
of CPU), loads on first use. OpenBLAS gets one thread, which numpy's import otherwise keeps
spinning. With `RECORD_PRIVATE_NAMES` naming a directory, the private names reached are
recorded (support/private_names.py).
"""

import gc
import importlib.abc
import importlib.util
import os
import sys


class _CollectorBackAfterTensorFlow(importlib.abc.MetaPathFinder):
    """Puts the collector's thresholds back when `tensorflow`'s import ends, however it ends,
    and leaves what the import made out of every later collection (`gc.freeze`)."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            gc.set_threshold(*_THRESHOLDS)
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            try:
                execute(module)
            finally:
                gc.set_threshold(*_THRESHOLDS)
                gc.freeze()

        spec.loader.exec_module = exec_module
        return spec


class _PyplotOnFirstUse(importlib.abc.MetaPathFinder):
    """Makes `matplotlib.pyplot` a module that runs its code at its first attribute read."""

    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.pyplot":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
if "matplotlib.pyplot" not in sys.modules:
    sys.meta_path.insert(0, _PyplotOnFirstUse())
_THRESHOLDS = gc.get_threshold()
if "tensorflow" not in sys.modules:
    gc.set_threshold(100 * _THRESHOLDS[0], *_THRESHOLDS[1:])
    sys.meta_path.insert(0, _CollectorBackAfterTensorFlow())

if os.environ.get("RECORD_PRIVATE_NAMES"):
    from support import private_names

    private_names.install(os.environ["RECORD_PRIVATE_NAMES"])
