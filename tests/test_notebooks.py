"""The example notebooks: stored executed, and a fresh run still gives what they show.

Each notebook runs once per session, in a fresh kernel of this interpreter (a kernel spec
written for the session, so no installed `python3` kernel of another environment is
picked up), with the test's environment. That one run is checked three ways: no cell
fails; the printed output agrees with figures worked out here; and the outputs stored in
the notebook have the same structure as the fresh ones (which cells show what, the same
lines with the numbers left out), so the rendered docs never show stale results.

A notebook whose stored outputs are missing or stale is stored again, executed, with

    python tests/test_notebooks.py notebooks/NAME.ipynb

(several names, or none for every notebook), which runs it as the test does.
"""

import ast
import asyncio
import collections
import contextlib
import json
import os
import pathlib
import re
import sys
import tempfile

import nbclient
import nbformat
import pytest
from ipykernel import kernelspec

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
KERNEL = "mgpu-tf-notebooks"
# Set (as tests/conftest.py sets it), TensorFlow's start-up lines are the user's choice and
# `mgpu_tf.setup_logging()` in a notebook's first cell leaves them in.
LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
CELL_TIMEOUT_SECONDS = 600


def store_command(path):
    """The one command that stores `path` executed, with its outputs."""
    return f"python tests/test_notebooks.py notebooks/{pathlib.Path(path).name}"


def _write_kernel_spec(root):
    kernelspec.write_kernel_spec(
        pathlib.Path(root) / "kernels" / KERNEL,
        overrides={"display_name": "mgpu_tf notebooks",
                   "env": {"MPLBACKEND": "module://matplotlib_inline.backend_inline"}})


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory):
    """A kernel spec for this interpreter, found first through JUPYTER_PATH."""
    root = tmp_path_factory.mktemp("jupyter")
    _write_kernel_spec(root)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(root))
        # As a reader runs them: the session's level would turn the notebooks' filter off.
        patch.delenv(LEVEL_VARIABLE, raising=False)
        yield KERNEL


async def _execute(path, kernel_name, workdir):
    """`(notebook, error)`: `path` run top to bottom in `workdir`, and the error or `None`."""
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook, kernel_name=kernel_name, timeout=CELL_TIMEOUT_SECONDS, record_timing=False,
        resources={"metadata": {"path": str(workdir)}})
    try:
        await client.async_execute()
    except Exception as error:  # noqa: BLE001 - reported by the notebook's test
        return notebook, error
    return notebook, None


def _code_cells(notebook):
    if not isinstance(notebook, nbformat.NotebookNode):
        notebook = nbformat.read(notebook, as_version=4)
    return [c for c in notebook.cells if c.cell_type == "code"]


# --- What a stored output may not hold ------------------------------------------------

# An absolute path of the machine that ran it (a temporary directory, a home, a checkout).
_MACHINE_PATH = re.compile(r"(?<![\w.])/(?:tmp|home|root|Users|work|var/folders|private)/")
# TensorFlow's C++ log (absl's `I0000 00:00:...  123 port.cc:153] `), or the line absl
# writes before its log is set up.
_NOISE = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ \S+\.cc:\d+\]|absl::InitializeLog", re.M)


def _texts(cell):
    for output in cell.outputs:
        if output.output_type == "stream":
            yield output.text
        else:
            yield from (v for k, v in output.get("data", {}).items() if k.startswith("text/"))
            yield "\n".join(output.get("traceback", []))


# --- The structure of outputs, not their numbers --------------------------------------

_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?%?", re.I)
# What the machine calls its processor ("(CPU: AMD EPYC, 2 cores)") differs between machines.
_DEVICE_NAME = re.compile(r"\((?:CPU|GPU)\b[^)]*\)")


def _shape(line):
    """A line with every number as `#` and runs of spaces as one: its keys, not its values."""
    return " ".join(_NUMBER.sub("#", _DEVICE_NAME.sub("(device)", line)).split())


def structure(notebook):
    """Per code cell, what it shows: each stream's lines (shapes, in sorted order, since
    processes writing to one stream interleave), and the kinds of each rich output."""
    cells = []
    for cell in _code_cells(notebook):
        streams, rich = collections.defaultdict(list), []
        for output in cell.outputs:
            if output.output_type == "stream":
                streams[output.name] += [_shape(line) for line in output.text.splitlines()
                                         if line.strip()]
            elif output.output_type == "error":
                rich.append(("error", output.ename))
            else:
                data = output.get("data", {})
                rich.append((output.output_type, tuple(sorted(data)),
                             _shape(data.get("text/plain", ""))))
        cells.append({"streams": {k: sorted(v) for k, v in sorted(streams.items())},
                      "rich": rich})
    return cells


# --- The tests -----------------------------------------------------------------------

def test_the_tutorial_notebooks_are_there():
    names = {p.name for p in NOTEBOOKS}
    assert {"01_quick_start.ipynb", "02_data_parallelism.ipynb", "03_model_parallelism.ipynb",
            "04_multi_worker.ipynb", "05_choosing_a_strategy.ipynb",
            "06_kerashub.ipynb"} <= names, names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_executed_with_clean_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    cells = _code_cells(notebook)
    fix = f"store it executed: {store_command(path)}"
    assert any(c.outputs for c in cells), f"{path.name} is stored without outputs; {fix}"
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1)), (
        f"{path.name} is not stored run top to bottom; {fix}")
    assert notebook.metadata.get("kernelspec", {}).get("name") == "python3", (
        f"{path.name}: the stored kernel is not the standard python3 one; {fix}")
    for number, cell in enumerate(cells):
        for text in _texts(cell):
            assert not _MACHINE_PATH.search(text), (
                f"{path.name}, code cell {number}, shows a path of this machine: "
                f"{_MACHINE_PATH.search(text).group()!r}...")
            assert not _NOISE.search(text), (
                f"{path.name}, code cell {number}, shows TensorFlow's log or a traceback: "
                f"{_NOISE.search(text).group()!r}")
        assert "execution" not in cell.metadata, f"{path.name} stores timings; {fix}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_first_code_cell_sets_the_devices(path):
    # Logical devices can be set only before TensorFlow's runtime starts.
    assert "mgpu_tf.simulate_devices(" in _code_cells(path)[0].source


def _quick_start(out):
    rows = re.findall(r"^ *(\w+)  replicas=(\d+)  last epoch's loss=([\d.]+)  "
                      r"test accuracy=([\d.]+)$", out, re.M)
    assert [(name, int(n)) for name, n, *_ in rows] == [
        ("default", 1), ("mirrored", 2), ("model_parallel", 1)], out
    losses = [float(loss) for _, _, loss, _ in rows]
    accuracy = [float(a) for *_, a in rows]
    assert min(accuracy) > 0.8, out
    # The text says the three train alike: the same update, up to float rounding.
    assert max(losses) - min(losses) < 1e-3 and max(accuracy) - min(accuracy) < 0.01, out


def _data_parallelism(out):
    seen = {int(r): ast.literal_eval(b) for r, b in re.findall(r"^replica (\d): (.*)$", out, re.M)}
    # Hand-worked: 50 examples, global batch 12 over 4 replicas, dealt round robin.
    assert seen == {r: [list(range(12 * s + r, min(12 * s + 12, 50), 4)) for s in range(5)]
                    for r in range(4)}, out
    assert "50 examples, each seen once" in out
    epochs = re.findall(r"^epoch (\d), replica 0: (.*)$", out, re.M)
    assert [e for e, _ in epochs] == ["1", "2"] and epochs[0][1] != epochs[1][1], out
    assert float(re.search(r"largest difference in any weight: (\S+)", out).group(1)) < 1e-5


def _model_parallelism(out):
    # Bytes per layer of lopsided(): 256->512, 512->512 twice, 512->64, then 64->64.
    layers = [4 * (256 * 512 + 512)] + [4 * (512 * 512 + 512)] * 2 + [4 * (512 * 64 + 64)] + [
        4 * (64 * 64 + 64)] * 12

    def heaviest_over_mean(counts):
        ends = [sum(counts[:i + 1]) for i in range(len(counts))]
        stages = [sum(layers[a:b]) for a, b in zip([0] + ends, ends)]
        return max(stages) / (sum(stages) / len(stages))

    for name, counts in [("uniform", [4, 4, 4, 4]), ("params", [1, 1, 1, 13])]:
        line = re.search(rf"^ *{name}: layers per stage (.*), heaviest / mean stage ([\d.]+) "
                         "by bytes$", out, re.M)
        assert line and json.loads(line.group(1)) == counts, out
        assert float(line.group(2)) == pytest.approx(heaviest_over_mean(counts), abs=0.005)
    assert re.findall(r"^M=(\d+): ", out, re.M) == ["1", "2", "4", "8"], out
    assert float(re.search(r"largest difference in any weight: (\S+)", out).group(1)) < 1e-4


def _multi_worker(out):
    config = json.loads(out[out.index("{"):out.index("\n}\n") + 2])
    assert config["task"] == {"type": "worker", "index": 1}
    assert (f"2 workers; this is worker 1 at {config['cluster']['worker'][1]} | chief: False"
            in out)
    assert "TF_CONFIG['task']['index'] must be in 0..0 for the 1 'worker' task(s)" in out
    epochs = re.findall(r"^\[(\d)\] start (\d): epoch (\d) done, loss ([\d.]+)$", out, re.M)
    # Worker 1 dies in epoch 3; the restart resumes from the backup made after epoch 2.
    for worker in "01":
        assert [(s, e) for w, s, e, _ in epochs if w == worker] == [
            ("0", "1"), ("0", "2"), ("1", "3"), ("1", "4"), ("1", "5")], out
    losses = {}
    for _, start, epoch, loss in epochs:
        losses.setdefault((start, epoch), set()).add(loss)
    assert all(len(v) == 1 for v in losses.values()), f"the workers disagree: {losses}"
    assert "[1] worker 1 is killed in epoch 3" in out and "restarting" in out
    assert "[0] finished" in out and "[1] finished" in out and "exit code: 0" in out
    assert re.search(r"^ +1 +32\.0 .*\nmeans over .*\nstraggler ratio \d", out, re.M), out  # the monitor's table
    predictions = re.search(r"^2 replicas; \[(.*)\]$", out, re.M)
    assert predictions and len(set(predictions.group(1).split())) == 1, out


def _choosing_a_strategy(out):
    assert out.startswith("recommended: data parallel"), out[:300]
    mib = {"KiB": 1 / 1024, "MiB": 1.0}
    rows = re.findall(r"^ +(\d+) +[\d,]+ +(?:([\d.]+) (KiB|MiB)|-) +(?:([\d.]+) (KiB|MiB)|-)  "
                      r"(\S+(?: not fit)?) +(\S+(?: not fit)?) *$", out, re.M)
    assert [int(r[0]) for r in rows] == [128, 192, 256, 320, 384, 448, 512, 640, 768, 1024]
    for width, whole, unit, stage, stage_unit, one, two in rows:
        # The rule the notebook states, applied to the sizes it prints (16 MiB devices);
        # between data and model parallelism, data parallelism with the slots sharded.
        for got, data, split in ((one, "mirrored", "model_parallel"),
                                 (two, "multi_worker", "hybrid")):
            if whole and float(whole) * mib[unit] <= 16:
                assert got == data, width
            elif got == f"{data}+sharded":
                continue
            elif whole and float(stage) * mib[stage_unit] <= 16:
                assert got == split, width
            else:
                assert got == "does not fit", width
    assert any(one == "mirrored+sharded" for *_, one, _ in rows), rows
    assert float(re.search(r"measured compute of one step: ([\d.]+) ms", out).group(1)) > 0


def _kerashub(out):
    # The pipeline's cut by hand: GPT-2's 4 equal blocks outweigh its embeddings and last
    # norm, two blocks a stage; a block of hidden 32 holds 4 projections of 32 x 32 + 32, 2
    # of the feed-forward (32 x 64 + 64, 64 x 32 + 32) and 2 norms of 2 x 32 float32 weights.
    block = 4 * (4 * (32 * 32 + 32) + 32 * 64 + 64 + 64 * 32 + 32 + 2 * 2 * 32)
    embeddings = 4 * (54 * 32 + 16 * 32)  # token (54 pieces) and position (16) embeddings
    stages = re.findall(r"^stage (\d) on \S+: ([\d,]+) bytes of weights, blocks (.*)$", out,
                        re.M)
    assert [(int(k), int(b.replace(",", ""))) for k, b, _ in stages] == [
        (0, embeddings + 2 * block), (1, 2 * block + 4 * 2 * 32)], out
    assert [ast.literal_eval(names) for *_, names in stages] == [
        ["transformer_layer_0", "transformer_layer_1"],
        ["transformer_layer_2", "transformer_layer_3"]], out
    losses = dict(re.findall(r"^(pipeline|one device), loss by epoch: +(\[.*\])$", out, re.M))
    piped, one = (ast.literal_eval(losses[k]) for k in ("pipeline", "one device"))
    assert len(one) == 3 and one[-1] < one[0], out
    assert max(abs(a - b) for a, b in zip(piped, one)) < 1e-3, out
    # The planner's per-stage table row names both stages' memory.
    assert re.search(r"^ +per stage: [\d.]+ [KM]iB \| [\d.]+ [KM]iB$", out, re.M), out
    workers = re.findall(r"^\[(\d)\] loss by epoch: (\[.*\])$", out, re.M)
    assert sorted(w for w, _ in workers) == ["0", "1"] and "exit code: 0" in out, out
    for _, loss in workers:  # one model: the workers' losses are one device's
        assert max(abs(a - b) for a, b in zip(ast.literal_eval(loss), one)) < 1e-3, out


# What each tutorial prints, checked against figures worked out here. A notebook without
# an entry is still run and its stored outputs compared with the fresh ones.
_CHECKS = {"01_quick_start": _quick_start, "02_data_parallelism": _data_parallelism,
           "03_model_parallelism": _model_parallelism, "04_multi_worker": _multi_worker,
           "05_choosing_a_strategy": _choosing_a_strategy, "06_kerashub": _kerashub}


async def _execute_all(paths, kernel_name, workdir_of, slots=2):
    """Every notebook of `paths` run in its own kernel, `slots` at a time (a kernel mostly
    uses one core); the longest first, so that the others share the second slot."""
    limit = asyncio.Semaphore(slots)

    async def run(path):
        async with limit:
            return path.stem, await _execute(path, kernel_name, workdir_of(path))

    ordered = sorted(paths, key=lambda p: p.stem != "04_multi_worker")
    return dict(await asyncio.gather(*(run(path) for path in ordered)))


@pytest.fixture(scope="module")
def executed(kernel_name, tmp_path_factory):
    """`{stem: (notebook, error)}`: each notebook run once, its outputs in the notebook."""
    return asyncio.run(_execute_all(NOTEBOOKS, kernel_name,
                                    lambda path: tmp_path_factory.mktemp(path.stem)))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_shows_its_results(path, executed):
    notebook, error = executed[path.stem]
    if error is not None:
        raise error  # a CellExecutionError names the failing cell
    cells = _code_cells(notebook)
    for number, cell in enumerate(cells):
        if "plt.show()" in cell.source:
            assert any("image/png" in o.get("data", {}) for o in cell.outputs), (
                f"{path.name}: code cell {number} draws a figure but shows no PNG")
    out = "".join(o.text for c in cells for o in c.outputs
                  if o.output_type == "stream" and o.name == "stdout")
    if path.stem in _CHECKS:
        _CHECKS[path.stem](out)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_outputs_are_those_of_a_fresh_run(path, executed):
    fresh, error = executed[path.stem]
    if error is not None:
        pytest.skip("the notebook fails; test_notebook_runs_and_shows_its_results says where")
    stored, now = structure(nbformat.read(path, as_version=4)), structure(fresh)
    assert len(stored) == len(now), f"{path.name}: code cells changed; {store_command(path)}"
    for number, (was, new) in enumerate(zip(stored, now)):
        assert was == new, (
            f"{path.name}, code cell {number}: the stored outputs are stale "
            f"(stored {was}, now {new}); store them again: {store_command(path)}")


def main(argv):
    """Runs each notebook named in `argv` (all with none) and stores it with its outputs."""
    paths = [pathlib.Path(a).resolve() for a in argv] or NOTEBOOKS
    for path in paths:
        if path.suffix != ".ipynb" or not path.exists():
            raise SystemExit(f"not a notebook: {path}")
    with tempfile.TemporaryDirectory() as root, contextlib.ExitStack() as stack:
        _write_kernel_spec(root)
        previous = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = root
        os.environ.pop(LEVEL_VARIABLE, None)
        # This checkout's mgpu_tf in the kernels, as tests/conftest.py gives the tests.
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        stack.callback(lambda: os.environ.__setitem__("JUPYTER_PATH", previous)
                       if previous is not None else os.environ.pop("JUPYTER_PATH", None))
        workdirs = [tempfile.mkdtemp(dir=root) for _ in paths]
        results = asyncio.run(_execute_all(
            paths, KERNEL, lambda p: workdirs[paths.index(p)]))
    failed = False
    for path in paths:
        notebook, error = results[path.stem]
        if error is not None:
            print(f"{path.name}: not stored, a cell failed:\n{error}", file=sys.stderr)
            failed = True
            continue
        original = nbformat.read(path, as_version=4)
        notebook.metadata = original.metadata  # the standard kernel, not this session's
        nbformat.write(notebook, path)
        print(f"stored {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
