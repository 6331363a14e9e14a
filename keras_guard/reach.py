"""Which patches a run reached: from coverage data of mgpu_tf/compat, per patch.

A patch is reached when the statement where it changes what Keras does ran (its `acting`
text below, found in its module's source), not merely when its wrapper was called.
"""

import pathlib

__all__ = ["ACTING", "per_patch"]

# patch name (mgpu_tf.compat.patches.PATCHES) -> (module of mgpu_tf/compat, the source text of
# the statements where it acts, and where it can act).
ACTING = {
    "multi_worker": ("multi_worker.py", ("strategy.experimental_local_results(v)[0]",
                                         "return _mean_logs(values, strategy)"),
                     "a model built from a distributed batch; logs over several workers"),
    "steps": ("keras_steps.py", ("strategy = model.distribute_strategy",),
              "fit, evaluate and *_on_batch under a strategy"),
    "optimizer": ("optimizer_hooks.py", ("return hook.",),
                  "an optimizer with options of the toolkit's (clipping under a strategy)"),
    "metric_sums": ("metric_sums.py", ("storage.assign_add(delta)",),
                    "Keras 3.8-3.9 only"),
    "metric_reads": ("metric_reads.py", ("traced[name] = ",),
                     "between steps under several workers (multi_worker) only"),
    "compile": ("compile_hook.py", (".prepare_compiled(model)",), "every compile"),
    "shuffle": ("shuffle_hook.py", ('kwargs["shuffle"] = False',),
                "fit on shard_dataset's data"),
    "fit": ("fit_hook.py", ("kind.prepare_fit(",), "every fit"),
    "custom_loop": ("custom_loop.py", (".merge_call(",),
                    "a custom loop whose optimizer is built at its first step"),
    "step_loss": ("step_loss.py", ("private_trainer.unscale_loss(value)",),
                  "a model's own train_step or test_step under a strategy"),
    "replica_seeds": ("replica_seeds.py", ("stateless_fold_in",),
                      "random layers in a replica's step"),
}


def _acting_lines(path, texts):
    return [number for number, line in enumerate(path.read_text().splitlines(), 1)
            if any(text in line for text in texts)]


def per_patch(data_file, compat):
    """`{patch: {"reached": bool or None, "lines": "run/statements", "where": text}}` from
    a coverage data file; `compat` is the folder of mgpu_tf/compat that ran. `reached` is
    None when the acting text is no longer in the module."""
    import coverage

    recorder = coverage.Coverage(data_file=str(data_file))
    recorder.load()
    data = recorder.get_data()
    out = {}
    for patch, (module, texts, where) in ACTING.items():
        path = pathlib.Path(compat) / module
        ran = set(data.lines(str(path)) or ())
        statements = recorder.analysis2(str(path))[1]
        acting = _acting_lines(path, texts)
        out[patch] = {"reached": bool(ran & set(acting)) if acting else None,
                      "lines": f"{len(ran & set(statements))}/{len(statements)}",
                      "where": where}
    return out
