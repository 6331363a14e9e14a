"""The example notebooks: committed clean, and each runs and shows what its text promises.

Each notebook runs in a fresh kernel of this interpreter (a kernel spec written for the
session, so no installed `python3` kernel of another environment is picked up), with
the test's environment. nbclient raises on the first cell that fails; then the printed
output is checked against figures worked out here, and each cell that draws shows a PNG.
"""

import ast
import asyncio
import json
import pathlib
import re
import sys

import nbclient
import nbformat
import pytest
from ipykernel import kernelspec

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
KERNEL = "mgpu-tf-notebooks"
CELL_TIMEOUT_SECONDS = 600


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory):
    """A kernel spec for this interpreter, found first through JUPYTER_PATH."""
    root = tmp_path_factory.mktemp("jupyter")
    kernelspec.write_kernel_spec(
        root / "kernels" / KERNEL,
        overrides={"display_name": f"mgpu_tf ({sys.executable})",
                   "env": {"MPLBACKEND": "module://matplotlib_inline.backend_inline"}})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(root))
        yield KERNEL


def _code_cells(path):
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def test_the_five_notebooks_are_there():
    names = [p.name for p in NOTEBOOKS]
    assert names == ["01_quick_start.ipynb", "02_data_parallelism.ipynb",
                     "03_model_parallelism.ipynb", "04_multi_worker.ipynb",
                     "05_choosing_a_strategy.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path):
    nbformat.validate(nbformat.read(path, as_version=4))
    for cell in _code_cells(path):
        assert cell.outputs == [] and cell.execution_count is None, (
            f"{path.name} holds outputs; clear them before committing")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_first_code_cell_sets_the_devices(path):
    # Logical devices can be set only before TensorFlow's runtime starts.
    assert "mgpu_tf.simulate_devices(" in _code_cells(path)[0].source


def _quick_start(out):
    rows = re.findall(r"^ *(\w+)  replicas=(\d+) +[\d,]+ examples/s  accuracy=([\d.]+)$", out, re.M)
    assert [(name, int(n)) for name, n, _ in rows] == [
        ("default", 1), ("mirrored", 2), ("model_parallel", 1)], out
    accuracy = [float(a) for _, _, a in rows]
    assert min(accuracy) > 0.8, out
    assert max(accuracy) - min(accuracy) < 0.05, "the text says all three reach about the same"


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


_CHECKS = {"01_quick_start": _quick_start, "02_data_parallelism": _data_parallelism,
           "03_model_parallelism": _model_parallelism, "04_multi_worker": _multi_worker,
           "05_choosing_a_strategy": _choosing_a_strategy}


def test_every_notebook_has_its_output_checked():
    assert sorted(_CHECKS) == [p.stem for p in NOTEBOOKS]


@pytest.fixture(scope="module")
def executed(kernel_name, tmp_path_factory):
    """Every notebook run in its own kernel, two at a time (a kernel mostly uses one core).

    Returns:
        `{stem: (notebook, error)}`: the notebook with its outputs, and the
        `CellExecutionError` naming the failing cell, or `None`.
    """
    async def run(path, slots):
        notebook = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(
            notebook, kernel_name=kernel_name, timeout=CELL_TIMEOUT_SECONDS,
            resources={"metadata": {"path": str(tmp_path_factory.mktemp(path.stem))}})
        async with slots:
            try:
                await client.async_execute()
            except Exception as error:  # noqa: BLE001 - reported by the notebook's test
                return path.stem, (notebook, error)
        return path.stem, (notebook, None)

    async def run_all():
        slots = asyncio.Semaphore(2)
        # The longest first, so that the others share the second slot beside it.
        ordered = sorted(NOTEBOOKS, key=lambda p: p.stem != "04_multi_worker")
        return dict(await asyncio.gather(*(run(path, slots) for path in ordered)))

    return asyncio.run(run_all())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_shows_its_results(path, executed):
    notebook, error = executed[path.stem]
    if error is not None:
        raise error  # a CellExecutionError names the failing cell
    cells = [c for c in notebook.cells if c.cell_type == "code"]
    for number, cell in enumerate(cells):
        if "plt.show()" in cell.source:
            assert any("image/png" in o.get("data", {}) for o in cell.outputs), (
                f"{path.name}: code cell {number} draws a figure but shows no PNG")
    out = "".join(o.text for c in cells for o in c.outputs
                  if o.output_type == "stream" and o.name == "stdout")
    _CHECKS[path.stem](out)
