"""Which patches a run reached: from coverage data of mgpu_tf/compat, per patch.

A patch is reached when the statement where it changes what Keras does ran (its `acting`
text below, found in its module's source), not merely when its wrapper was called. The data
are the union of the run's own file and those of the processes its tests started (the
workers of `paths_test.py`). A patch the run did not install (it does not apply to the Keras
under test, or acts on another library) is reported with the reason, and is not required.
"""

import pathlib

__all__ = ["ACTING", "per_patch", "unreached", "verdict"]

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
                    "metrics under several replicas, on Keras 3.8-3.9 only"),
    "metric_reads": ("metric_reads.py", ("traced[name] = ",),
                     "metric reads between steps under several workers "
                     "(paths_test's 2 worker processes)"),
    "compile": ("compile_hook.py", (".prepare_compiled(model)",), "every compile"),
    "shuffle": ("shuffle_hook.py", ('kwargs["shuffle"] = False',),
                "fit on shard_dataset's data"),
    "fit": ("fit_hook.py", ("kind.prepare_fit(",), "every fit"),
    "custom_loop": ("custom_loop.py", (".merge_call(",),
                    "a custom loop whose optimizer is built at its first step"),
    "lazy_build": ("lazy_build.py", (".merge_call(",),
                   "a model built at its first call inside strategy.run"),
    "step_loss": ("step_loss.py", ("private_trainer.unscale_loss(value)",),
                  "a model's own train_step or test_step under a strategy"),
    "replica_seeds": ("replica_seeds.py", ("stateless_fold_in",),
                      "random layers in a replica's step"),
    "keras_hub": ("keras_hub.py", ("preprocessable.with_preprocessing(",),
                  "KerasHub's task models, installed once KerasHub is imported, which "
                  "Keras' tests never do (tests/test_kerashub.py runs it)"),
}


def _acting_lines(path, texts):
    return [number for number, line in enumerate(path.read_text().splitlines(), 1)
            if any(text in line for text in texts)]


def per_patch(data_files, compat, installed=None):
    """`{patch: {"reached": bool or None, "installed": bool or None, "lines": "run/statements",
    "where": text}}` from coverage data files (their lines united); `compat` is the folder of
    mgpu_tf/compat that ran, `installed` the names of the patches the run had in place (None:
    not known). `reached` is None when the acting text is no longer in the module."""
    import coverage

    data_files = [pathlib.Path(f) for f in data_files]
    recorder = coverage.Coverage(data_file=str(data_files[0]))
    recorder.load()
    runs = []
    for data_file in data_files:
        data = coverage.CoverageData(basename=str(data_file))
        data.read()
        runs.append(data)
    out = {}
    for patch, (module, texts, where) in ACTING.items():
        path = pathlib.Path(compat) / module
        ran = set().union(*(set(data.lines(str(path)) or ()) for data in runs))
        statements = recorder.analysis2(str(path))[1]
        acting = _acting_lines(path, texts)
        out[patch] = {"reached": bool(ran & set(acting)) if acting else None,
                      "installed": None if installed is None else patch in installed,
                      "lines": f"{len(ran & set(statements))}/{len(statements)}",
                      "where": where}
    return out


def unreached(reached):
    """The patches of `per_patch`'s answer the run installed and did not reach (or whose
    acting text is gone): each a failure of the run."""
    return [patch for patch, found in reached.items()
            if found["installed"] is not False and not found["reached"]]


def verdict(found):
    """One word for a patch of `per_patch`'s answer: reached, NOT reached, not installed,
    or acting text gone."""
    if found["reached"] is None:
        return "acting text gone"
    if found["reached"]:
        return "reached"
    return "not installed" if found["installed"] is False else "NOT reached"
