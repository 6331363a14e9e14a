# For type checkers and IDEs; at run time lazy-loader loads each import below on first use.
# Type checkers take a stub's imports as exported only where `__all__` names them.

__all__ = ["KERAS_20585_VERSIONS", "KERAS_STEP_VERSIONS", "apply_multi_worker_fixes",
           "apply_step_fixes", "distinct_collective_keys", "multi_worker_fixes_apply",
           "set_log_mean", "step_fixes_apply"]

from . import (collective_keys, compile_hook, keras_steps, keras_train_step, metric_sums,
               multi_worker, native_logs, optimizer_hooks, patches, private, private_callbacks,
               private_collectives, private_trainer, releases, shuffle_hook, versions)
from .collective_keys import distinct_collective_keys
from .keras_steps import KERAS_STEP_VERSIONS, apply_step_fixes, step_fixes_apply
from .multi_worker import (KERAS_20585_VERSIONS, apply_multi_worker_fixes, multi_worker_fixes_apply,
                           set_log_mean)
