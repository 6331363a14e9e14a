"""What Keras' test files import beyond the toolkit's requirements, installed beside them.

Into a folder of the cache (one per Python), without touching the environment's packages:
only the modules the interpreter lacks, each without its dependencies (TensorFlow brought
them). `torch` and `grain` stay out (their wheels are large): `plugin.STAND_INS`.
"""

import importlib.util
import pathlib
import subprocess
import sys

from keras_guard import sdist

__all__ = ["NEEDS", "ensure"]

# import name -> the distributions that install it.
NEEDS = {"jax": ("jax", "jaxlib"), "scipy": ("scipy",), "coverage": ("coverage",)}


def ensure(cache=sdist.CACHE):
    """The folder to put on `PYTHONPATH` that holds the `NEEDS` this interpreter lacks."""
    folder = pathlib.Path(cache) / f"needs-py{sys.version_info[0]}{sys.version_info[1]}"
    missing = [distribution for name, distributions in NEEDS.items()
               if importlib.util.find_spec(name) is None
               and not (folder / name).exists() for distribution in distributions]
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--upgrade", "--target", str(folder), *missing], check=True)
    return folder
