"""Runs the installed Keras release's own tests three times and checks the outcomes.

    python -m keras_guard.run [--area ci|full] [--out FOLDER]

Keras alone, with every patch (`patched`), and under `make_strategy("mirrored")` on 2
devices (`mirrored`), at once, each in its own process. It fails when a test's outcome with
the patches differs from Keras alone's, when a test that passes alone does not pass under
the strategy and is not declared (`differences`), or when a test of `paths_test.py` fails.
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

from keras_guard import areas, compare, needs, plugin, sdist

__all__ = ["main", "summary"]

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
# Tests shown per list on the terminal; report.txt has every one.
_SHOWN = 20
# The folder of the test tree the harness' own test files are copied to.
ADDED_FOLDER = "mgpu_tf_paths"


def _command(tree, paths, mode, out, coverage, area=None):
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-p", "keras_guard.plugin", "--import-mode=importlib", "--rootdir", str(tree),
               "-c", str(tree / "pyproject.toml"), "-o", "addopts=",
               "--continue-on-collection-errors", f"--guard-mode={mode}",
               f"--guard-outcomes={out / f'{mode}.json'}",
               f"--guard-installed={out / f'{mode}.installed.json'}", *paths]
    if area is not None:
        command.append(f"--guard-area={area}")
    if coverage:
        command.append(f"--guard-coverage={out / f'{mode}.coverage'}")
    return command


def _added(tree):
    folder = tree / ADDED_FOLDER
    folder.mkdir(exist_ok=True)
    for name in areas.ADDED:
        shutil.copyfile(HERE / name, folder / name)
    return [f"{ADDED_FOLDER}/{name}" for name in areas.ADDED]


def run(area, out, jobs=3):
    """Runs the three modes on `area`'s files, `jobs` at once; returns `(release,
    {mode: outcomes}, {mode: [wall-clock seconds, CPU seconds]})`. The CPU seconds are the
    process' and those of the processes it waited for (its tests' workers)."""
    tree, release = sdist.test_tree()
    extra = needs.ensure()
    paths = areas.paths(area, tree) + _added(tree)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE / "shim"), str(extra)]))
    coverage = (extra / "coverage").exists() or _importable("coverage")
    for old in [*out.glob("mirrored.coverage*"), *out.glob("*.installed.json")]:
        old.unlink()  # a run's files only: the reach report unites every worker's
    pending = list(plugin.MODES)
    running, seconds = {}, {}
    while pending or running:
        while pending and len(running) < jobs:
            mode = pending.pop(0)
            log = open(out / f"{mode}.log", "w", encoding="utf-8")
            command = _command(tree, paths, mode, out, coverage and mode == "mirrored", area)
            running[mode] = (subprocess.Popen(command, cwd=tree, env=env, stdout=log,
                                              stderr=subprocess.STDOUT), log, time.monotonic())
        for mode, (process, log, started) in list(running.items()):
            pid, _, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                log.close()
                seconds[mode] = [round(time.monotonic() - started),
                                 round(usage.ru_utime + usage.ru_stime)]
                del running[mode]
        time.sleep(0.5)
    outcomes = {}
    for mode in plugin.MODES:
        path = out / f"{mode}.json"
        outcomes[mode] = json.loads(path.read_text()) if path.exists() else {}
    return release, outcomes, seconds


def coverage_files(out):
    """The mirrored run's coverage data files: its own, then its tests' worker processes'."""
    own = out / "mirrored.coverage"
    return [own, *sorted(out.glob("mirrored.coverage.worker*"))] if own.exists() else []


def installed(out):
    """`{mode: [patch names in place at its end]}` of the runs that wrote them."""
    found = {}
    for mode in plugin.MODES:
        path = out / f"{mode}.installed.json"
        if path.exists():
            found[mode] = json.loads(path.read_text())
    return found


def _last(out):
    """What `run` returned, read back from the files the last run wrote into `out`."""
    last = json.loads((out / "summary.json").read_text())
    outcomes = {mode: json.loads((out / f"{mode}.json").read_text()) for mode in plugin.MODES}
    return last["release"], outcomes, last["seconds"]


def _importable(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _seconds(value):
    """`"W s (C s of CPU)"` of a run's `[wall clock, CPU]`, or what an older run wrote."""
    if isinstance(value, list):
        return f"{value[0]} s ({value[1]} s of CPU)"
    return f"{value if value is not None else '?'} s"


def summary(release, outcomes, seconds, reached=None, shown=None, stack=None, jobs=3,
            in_place=None):
    """`(holds, lines)`: the checks of three runs' outcomes, as lines to print, with at most
    `shown` tests of each list (all by default). `reached` is `reach.per_patch`'s answer,
    `stack` the TensorFlow and Keras under test (read from them when None), `in_place`
    `installed`'s answer."""
    if stack is None:
        import keras
        import tensorflow as tf

        stack = f"TensorFlow {tf.__version__} + Keras {keras.__version__}"
    report = compare.compare(outcomes["alone"], outcomes["patched"], outcomes["mirrored"])
    added = {n: r for n, r in outcomes["mirrored"].items() if n.startswith(ADDED_FOLDER + "/")}
    added_failed = [(n, r[1]) for n, r in sorted(added.items()) if r[0] != "pass"]
    keras_only = {mode: {n: r for n, r in runs.items() if n not in added}
                  for mode, runs in outcomes.items()}
    at_once = "at once" if jobs >= len(plugin.MODES) else f"{jobs} at a time"
    lines = [f"Keras' own tests of {release} on {stack} (the three runs {at_once})"]
    for mode in plugin.MODES:
        found = compare.counts(keras_only[mode])
        lines.append(f"  {mode:9} {found['pass']} passed, {found['fail']} failed, "
                     f"{found['skip']} skipped in {_seconds(seconds.get(mode))}")
    own = [n for n, outcome in report.own_strategy if outcome == "pass"]
    lines.append(f"  mirrored: {len(report.declared)} failed as declared, "
                 f"{len(report.declared_but_passed)} declared to fail passed, {len(own)} of "
                 f"{len(report.own_strategy)} passed under their own strategy")
    lines.append(f"  {ADDED_FOLDER}: {len(added) - len(added_failed)} of {len(added)} passed "
                 "under mirrored")
    leaked = (in_place or {}).get("alone") or []
    if in_place:
        lines.append("  patches in place at the end: " + "; ".join(
            f"{mode} {len(names)}" for mode, names in in_place.items()))
    unreached = []
    if reached:
        from keras_guard import reach

        unreached = reach.unreached(reached)
    sections = (("outcome changed by the patches", report.changed_by_patches),
                ("passes alone, not under mirrored, undeclared", report.undeclared),
                ("not run by every mode", report.missing),
                (f"{ADDED_FOLDER} failed under mirrored", added_failed),
                ("patches in place in the run of Keras alone", [(n, "") for n in leaked]),
                ("patches installed under mirrored but not reached",
                 [(n, reached[n]["where"]) for n in unreached]),
                ("declared, failed as declared", report.declared),
                ("declared, but passed", report.declared_but_passed))
    for title, found in sections:
        if found:
            lines.append(f"{title} ({len(found)}):")
            lines += [f"  {node}: {what}" if what else f"  {node}" for node, what in found[:shown]]
            if shown is not None and len(found) > shown:
                lines.append(f"  ... and {len(found) - shown} more (report.txt has them)")
    if reached:
        from keras_guard import reach

        lines.append("patches under mirrored (reached: the statement where it acts ran; lines "
                     "of its module run; where it acts):")
        for patch, found in reached.items():
            lines.append(f"  {patch:14} {reach.verdict(found):16} {found['lines']:>7}  "
                         f"{found['where']}")
        lines.append(f"  {sum(bool(f['reached']) for f in reached.values())} of "
                     f"{len(reached)} reached; every patch installed is to be reached")
    else:
        lines.append("patches reached: not recorded (no coverage data of the mirrored run)")
    holds = (report.holds and not added_failed and len(added) > 0 and not unreached
             and not leaked)
    return holds, lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--area", choices=sorted(areas.AREAS), default="ci",
                        help="ci: trainers and tf.distribute tests; full: every area the "
                             "patches touch. Defaults to ci.")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / ".nox" / "keras_guard",
                        help="where the logs and outcomes go. Defaults to .nox/keras_guard.")
    parser.add_argument("--jobs", type=int, default=3,
                        help="runs at once, each a process. Defaults to 3.")
    parser.add_argument("--check-only", action="store_true",
                        help="check the outcomes the last runs wrote, without running them")
    args = parser.parse_args(argv)
    import mgpu_tf

    distribution, version = sdist.installed_keras()
    out = args.out / f"{distribution}-{version}-{args.area}"
    if args.check_only:
        release, outcomes, seconds = _last(out)
    else:
        release, outcomes, seconds = run(args.area, out, args.jobs)
    in_place, reached = installed(out), None
    if coverage_files(out):
        from keras_guard import reach

        sys.path.append(str(needs.ensure()))  # coverage, when it came from there
        reached = reach.per_patch(coverage_files(out),
                                  pathlib.Path(mgpu_tf.__file__).parent / "compat",
                                  in_place.get("mirrored"))
    holds, lines = summary(release, outcomes, seconds, reached, jobs=args.jobs,
                           in_place=in_place)
    (out / "report.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(summary(release, outcomes, seconds, reached, shown=_SHOWN, jobs=args.jobs,
                            in_place=in_place)[1]))
    print(f"every test's outcome: {out}")
    (out / "summary.json").write_text(json.dumps(
        {"release": release, "holds": holds, "seconds": seconds, "reached": reached,
         "counts": {m: compare.counts(o) for m, o in outcomes.items()}}, indent=1))
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
