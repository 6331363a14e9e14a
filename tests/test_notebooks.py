"""The example notebooks: committed clean, and each runs top to bottom without an error.

Each notebook runs in a fresh kernel of this interpreter (a kernel spec written for the
session, so no installed `python3` kernel of another environment is picked up), with
the test's environment. nbclient raises on the first cell that fails.
"""

import pathlib
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, kernel_name, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook, kernel_name=kernel_name, timeout=CELL_TIMEOUT_SECONDS,
        resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the failing cell
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    plots = "plt.show()" in "".join(c.source for c in notebook.cells if c.cell_type == "code")
    if plots:
        assert any("image/png" in o.get("data", {}) for o in outputs), (
            f"{path.name} draws figures but produced no PNG")
