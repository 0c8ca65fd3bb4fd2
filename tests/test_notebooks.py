"""Every notebook in ``examples/`` runs top to bottom on the ``ipympi`` kernel.

Executed by nbclient, as ``jupyter execute`` would, with a kernel spec
installed in a temporary prefix; a cell that raises fails the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kernel_helpers import kernel_specs_installed

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "examples").glob("*.ipynb"))


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory):
    with kernel_specs_installed(tmp_path_factory.mktemp("jupyter")) as data_dir:
        yield data_dir


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_example_notebook_runs(path: Path, kernel_specs: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    assert notebook.metadata["kernelspec"]["name"] == "ipympi"
    client = nbclient.NotebookClient(
        notebook, timeout=60, kernel_name="ipympi", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()
    for cell in notebook.cells:
        if cell.cell_type == "code":
            kinds = {output.output_type for output in cell.outputs}
            assert "error" not in kinds, cell.source


def test_hello_notebook_shows_labelled_output(kernel_specs: Path) -> None:
    notebook = nbformat.read(ROOT / "examples" / "01_hello_ranks.ipynb", as_version=4)
    nbclient.NotebookClient(notebook, timeout=60, kernel_name="ipympi").execute()
    first = next(c for c in notebook.cells if c.cell_type == "code")
    text = "".join(o.get("text", "") for o in first.outputs if o.output_type == "stream")
    assert text == "".join(f"[stdout:{r}] hello from rank {r} of 4\n" for r in range(4))
