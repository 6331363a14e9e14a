"""Runs a Ray Train script as its `__main__`, on a local Ray instance of its own.

Usage: `python -m support.ray_recipe SCRIPT RAY_TEMP_DIR`. Ray starts with two CPUs
(one per Ray Train worker), its files in RAY_TEMP_DIR and no dashboard, and stops
when the script ends; the script itself is run unchanged, as `python SCRIPT` would.
"""

import runpy
import sys

import ray

__all__ = ["main"]


def main(script, temp_dir):
    ray.init(num_cpus=2, _temp_dir=temp_dir, include_dashboard=False)
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:])
