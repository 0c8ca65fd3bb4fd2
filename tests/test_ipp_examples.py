"""IPython Parallel's own MPI example notebooks run top to bottom on ipympi.

Downloaded at test time from IPython Parallel's source distribution (see
``conformance/ipp_examples.py``), their cluster lines changed, and run by
nbclient in a plain IPython kernel, through both routes where the notebook's
calls allow: IPython Parallel's client with ``engines="ipympi"``, and
ipympi's own client. Every process a run starts (kernel, controller, engines,
ranks) carries a mark in its environment; none may be left afterwards.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid

import pytest
from conftest import ROOT
from kernel_helpers import strip_ansi

ipp = pytest.importorskip("ipyparallel")
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")

sys.path.insert(0, str(ROOT / "conformance"))
import ipp_examples  # noqa: E402

pytestmark = pytest.mark.ipp_examples  # a CI step of its own (see pyproject.toml)
CELL_TIMEOUT = 120
CASES = [
    pytest.param(name, route, id=f"{route}-{name.removesuffix('.ipynb').replace(' ', '_')}")
    for name, plan in ipp_examples.NOTEBOOKS.items()
    for route in plan.routes
]
MARK = "IPYMPI_IPP_EXAMPLE_RUN"


@pytest.fixture(scope="module")
def examples() -> str:
    try:
        return ipp_examples.fetch_examples(ipp.__version__)
    except Exception as exc:  # no network, no pip: nothing to run
        pytest.skip(f"IPython Parallel's examples could not be fetched: {exc}")


def marked_processes(mark: str) -> list[int]:
    """Processes whose environment holds ``MARK=mark`` (only ours are readable)."""
    found = []
    needle = f"{MARK}={mark}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.mark.timeout(400)
@pytest.mark.parametrize(("name", "route"), CASES)
def test_ipyparallel_example_runs_on_ipympi(
    name: str, route: str, examples: str, tmp_path, monkeypatch
) -> None:
    notebook = nbformat.read(os.path.join(examples, name), as_version=4)
    notebook = ipp_examples.prepared(notebook, name, route)
    mark = uuid.uuid4().hex
    monkeypatch.setenv(MARK, mark)
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))  # IPython Parallel's profiles
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    for key in [k for k in os.environ if k.startswith("IPYMPI_")]:
        monkeypatch.delenv(key)
    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    try:
        client.execute()
    finally:
        leftovers = _end_leftovers(mark)
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        text = "\n".join(strip_ansi("\n".join(o.traceback)) for o in errors)
        if "raises-exception" in cell.metadata.get("tags", []):
            assert errors, f"this cell should fail but did not:\n{cell.source}"
        else:
            assert not errors, f"this cell failed:\n{cell.source}\n{text}"
    assert leftovers == [], f"processes left running after the kernel ended: {leftovers}"


def _end_leftovers(mark: str) -> list[int]:
    """The marked processes still there a few seconds after the kernel ended (killed)."""
    deadline = time.monotonic() + 15
    while True:
        left = [pid for pid in marked_processes(mark) if pid != os.getpid()]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left
