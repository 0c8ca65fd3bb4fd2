"""The example notebooks run top to bottom on the ``ipympi`` kernel and show what they should.

Executed by nbclient, as ``jupyter execute`` would, with a kernel spec
installed in a temporary prefix and a session of 4 ranks. A cell tagged
``raises-exception`` fails on purpose: it must end with an error, and every
other cell must not. Each notebook runs once; the tests of what particular
cells show (the deadlock report, the heat equation's check against the serial
solution, the figures) look at that one executed copy.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from kernel_helpers import kernel_specs_installed, strip_ansi

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
RANKS = 4  # the session size the notebooks' expected outputs are written for
CELL_TIMEOUT = 30  # seconds for one cell; each notebook takes a few seconds in all
NOTEBOOK_TIMEOUT = 120  # seconds for a test that starts a kernel and runs a whole notebook
FAILS_ON_PURPOSE = "raises-exception"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """``executed(name)``: the notebook ``examples/name`` after a run (run once per module)."""
    runs: dict[str, Any] = {}
    jupyter = tmp_path_factory.mktemp("jupyter")
    with kernel_specs_installed(jupyter), pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("IPYMPI_")]:
            mp.delenv(key)
        mp.setenv("IPYMPI_NP", str(RANKS))

        def run(name: str) -> Any:
            if name not in runs:
                notebook = nbformat.read(EXAMPLES / name, as_version=4)
                client = nbclient.NotebookClient(
                    notebook,
                    timeout=CELL_TIMEOUT,
                    kernel_name="ipympi",
                    resources={"metadata": {"path": str(ROOT)}},
                )
                runs[name] = None  # a notebook that failed to run is not run again
                client.execute()
                runs[name] = notebook
            if runs[name] is None:
                pytest.fail(f"{name} failed to run in an earlier test")
            return runs[name]

        yield run


# -- reading an executed notebook -----------------------------------------------------------
def code_cells(notebook: Any) -> list[Any]:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def cell_with(notebook: Any, snippet: str, whole: bool = False) -> Any:
    """The one code cell whose source contains ``snippet`` (is ``snippet``, with ``whole``)."""
    found = [
        cell
        for cell in code_cells(notebook)
        if (cell.source.strip() == snippet if whole else snippet in cell.source)
    ]
    assert len(found) == 1, f"{len(found)} code cells contain {snippet!r}"
    return found[0]


def text_of(cell: Any) -> str:
    """Everything a cell printed, returned or raised, as plain text."""
    parts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type == "error":
            parts.extend([f"{output.ename}: {output.evalue}", *output.traceback])
        else:
            parts.append(output.get("data", {}).get("text/plain", ""))
    return strip_ansi("\n".join(parts))


def error_of(cell: Any) -> Any:
    errors = [output for output in cell.outputs if output.output_type == "error"]
    assert len(errors) == 1, f"{len(errors)} errors in {cell.source!r}"
    return errors[0]


def mime_types(cell: Any) -> set[str]:
    return {kind for output in cell.outputs for kind in output.get("data", {})}


# -- every notebook ---------------------------------------------------------------------------
@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_example_notebook_runs(path: Path, executed) -> None:
    assert nbformat.read(path, as_version=4).metadata["kernelspec"]["name"] == "ipympi"
    notebook = executed(path.name)
    for cell in code_cells(notebook):
        kinds = {output.output_type for output in cell.outputs}
        if FAILS_ON_PURPOSE in cell.metadata.get("tags", []):
            assert "error" in kinds, f"this cell should fail but did not:\n{cell.source}"
        else:
            assert "error" not in kinds, f"this cell failed:\n{cell.source}\n{text_of(cell)}"
        # Leftover messages are reported as warnings: an example must not leave any.
        assert "ipympi warning" not in text_of(cell), cell.source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_example_notebook_is_stored_without_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in code_cells(notebook):
        assert cell.outputs == [] and cell.execution_count is None, cell.source


# -- what particular notebooks show -----------------------------------------------------------
@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
def test_hello_notebook_shows_labelled_output(executed) -> None:
    notebook = executed("01_hello_ranks.ipynb")
    first = code_cells(notebook)[0]
    text = "".join(o.get("text", "") for o in first.outputs if o.output_type == "stream")
    assert text == "".join(f"[stdout:{r}] hello from rank {r} of 4\n" for r in range(4))


@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
def test_collectives_notebook_explains_and_traces(executed) -> None:
    notebook = executed("03_collectives_step_by_step.ipynb")
    scattered = text_of(cell_with(notebook, "%mpi show part", whole=True))
    for rank in range(RANKS):
        assert f"[{2 * rank}.* {2 * rank + 1}.*]" in scattered, scattered
    bcast = text_of(cell_with(notebook, "%mpi explain comm.Bcast"))
    assert "algorithm bcast_binomial, root 0, 4 ranks, 2 steps" in bcast, bcast
    allreduce = cell_with(notebook, "%mpi explain comm.Allreduce")
    assert {"text/html", "text/plain"} <= mime_types(allreduce)
    text = text_of(allreduce)
    assert "allreduce_recursive_doubling, 4 ranks, 2 steps" in text, text
    assert "[10. 100.]" in text  # the sum of 1..4 times [1, 10], on every rank
    traced = cell_with(notebook, 'comm.send("done"')
    assert {"image/svg+xml", "text/plain"} <= mime_types(traced)
    algorithms = text_of(cell_with(notebook, "for coll in trace.collectives"))
    assert "Barrier    barrier_dissemination" in algorithms, algorithms
    assert "first message:" in algorithms
    switch = text_of(cell_with(notebook, "for coll in ipympi.last_trace().collectives"))
    assert switch.split() == [
        "Allreduce",
        "allreduce_recursive_doubling",
        "Allreduce",
        "allreduce_ring",
    ], switch


@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
def test_point_to_point_notebook_reports_its_deadlock(executed) -> None:
    notebook = executed("02_point_to_point.ipynb")
    deadlock = cell_with(notebook, "received = comm.recv(source=partner, tag=7)\n    comm.send")
    assert error_of(deadlock).ename == "DeadlockError"
    report = text_of(deadlock)
    assert "rank 0 waits in recv(source=1, tag=7) on MPI_COMM_WORLD" in report
    assert "rank 1 waits in recv(source=0, tag=7) on MPI_COMM_WORLD" in report
    assert "ranks 2,3 have finished the cell" in report
    # the ranks were stopped, not lost, and the fixes exchange the values
    after = text_of(cell_with(notebook, "is fine; its left neighbour"))
    assert all(f"[stdout:{r}] rank {r} is fine" in after for r in range(RANKS))
    fixed = text_of(cell_with(notebook, "(sendrecv)"))
    assert "rank 0 received 1 (sendrecv)" in fixed and "rank 1 received 0 (sendrecv)" in fixed
    ring = text_of(cell_with(notebook, "the token came back"))
    assert f"the token came back to rank 0: {list(range(RANKS))}" in ring


@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
def test_groups_notebook_compares_communicators(executed) -> None:
    notebook = executed("04_groups_and_communicators.ipynb")
    comparisons = text_of(cell_with(notebook, "comparisons = {"))
    assert "'comm vs comm': 'IDENT'" in comparisons
    assert "'comm vs comm.Dup()': 'CONGRUENT'" in comparisons
    assert "'comm vs reversed': 'SIMILAR'" in comparisons
    assert "'comm vs row_comm': 'UNEQUAL'" in comparisons
    rows = text_of(cell_with(notebook, "row_total = row_comm.allreduce(rank)"))
    assert "row 0: members [0, 1], sum of their world ranks 1" in rows
    assert "row 1: members [2, 3], sum of their world ranks 5" in rows
    cart = text_of(cell_with(notebook, "cart.Sub([False, True])"))
    assert cart.count("vs row_comm: CONGRUENT") == RANKS


@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
def test_heat_equation_notebook_matches_the_serial_solution(executed) -> None:
    notebook = executed("05_heat_equation.ipynb")
    check = text_of(cell_with(notebook, "serial = initial()"))
    assert "[stdout:0] the parallel field matches the serial solution" in check
    assert "DIFFERS" not in check
    plot = cell_with(notebook, "plt.show()")
    assert "image/png" in mime_types(plot)
    shown = [o.metadata.get("ipympi", {}) for o in plot.outputs if "data" in o]
    # A slow cell also keeps its cleared progress line (an empty display).
    assert [m.get("rank") for m in shown if not m.get("progress")] == [0]


@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
def test_errors_notebook_shows_each_kind_of_failure(executed) -> None:
    notebook = executed("06_errors_and_error_handlers.ipynb")
    raised = error_of(cell_with(notebook, 'raise ValueError(f"rank {rank} found'))
    assert raised.ename == "ValueError"
    assert strip_ansi(raised.traceback[0]).startswith("rank 2 of 4 raised ValueError")
    kept = text_of(cell_with(notebook, "progress = {progress}"))
    assert "[stdout:2] rank 2: counter = 20, progress = started" in kept
    assert "[stdout:3] rank 3: counter = 30, progress = finished" in kept

    invalid = error_of(cell_with(notebook, 'comm.send("hello", dest=size)', whole=True))
    assert invalid.ename == "MPI.Exception" and "Invalid rank" in invalid.evalue
    caught = text_of(cell_with(notebook, "except MPI.Exception as error:\n    error_class"))
    match = re.search(r"class (\d+), code (\d+) \(MPI.ERR_RANK is (\d+)\)", caught)
    assert match and match[1] == match[2] == match[3], caught

    handler = text_of(cell_with(notebook, "handler = MPI.Comm.Create_errhandler"))
    assert "rank 0: MPI error on logged: Invalid rank" in handler
    called = text_of(cell_with(notebook, "logged.Call_errhandler(DIVERGED)"))
    assert "[stdout:1] rank 1: MPI error on logged: solver error: the iteration diverged" in called
    own = error_of(cell_with(notebook, "raise MPI.Exception(DIVERGED)"))
    assert own.evalue == "solver error: the iteration diverged"

    mismatch = text_of(cell_with(notebook, 'value = comm.bcast("data", root=0)'))
    assert "collective mismatch" in mismatch
    assert "called bcast(root=0)" in mismatch and "called reduce(root=0)" in mismatch

    polling = error_of(cell_with(notebook, "while not comm.Iprobe(source=1, tag=99)"))
    assert polling.ename == "TimeoutError" and "--timeout 2 s" in polling.evalue
    waiting = cell_with(notebook, "comm.recv(source=1, tag=98)")
    assert error_of(waiting).ename == "TimeoutError"
    assert "on_error=wait" in text_of(waiting)

    report = text_of(cell_with(notebook, "report = failures[-1]"))
    assert "failed with KeyError" in report and "rank 3: failed" in report
    assert "rank 0: stopped" in report and "in Barrier" in report

    fatal = error_of(cell_with(notebook, "fatal.Set_errhandler(MPI.ERRORS_ARE_FATAL)"))
    assert fatal.ename == "MPIAbort" and "rank 2: fatal error in send on fatal" in fatal.evalue
    fresh = text_of(cell_with(notebook, "is counter still defined?"))
    assert "the previous MPI world has ended" in fresh
    assert fresh.count("is counter still defined? False") == RANKS
    died = text_of(cell_with(notebook, "remove_error_hook(remember)"))
    assert died.count(": died") == RANKS


@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
def test_latency_notebook_measures_and_plots(executed) -> None:
    notebook = executed("07_latency_and_bandwidth.ipynb")
    table = text_of(cell_with(notebook, "measured = comm.gather("))
    rows = re.findall(r"\[stdout:0\]\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", table)
    assert [int(row[0]) for row in rows] == [2**k for k in range(25)]
    assert all(float(value) > 0 for row in rows for value in row[1:])
    plots = [cell for cell in code_cells(notebook) if "plt.show()" in cell.source]
    assert len(plots) == 2
    for plot in plots:
        assert "image/png" in mime_types(plot), plot.source
    summary = text_of(cell_with(notebook, "large messages on this machine"))
    assert "[stdout:0] latency of messages up to 1 KiB: about" in summary
    assert re.search(r"large messages on this machine: (process_vm_readv|chunks)", summary)


def test_ipyparallel_users_notebook(executed) -> None:
    notebook = executed("10_ipyparallel_users.ipynb")
    # linspace(0, 3, 22) sums to 33: every rank's Allreduce gives the whole sum
    assert "[33.0, 33.0, 33.0, 33.0]" in text_of(cell_with(notebook, 'view["total"]'))
    assert "{0: 'rank 0 of 4', 1: 'rank 1 of 4'" in text_of(cell_with(notebook, "get_dict()"))
    failure = text_of(cell_with(notebook, "view.apply_sync(fragile)"))
    assert "rank 2 of 4 raised ValueError: rank 2 cannot go on" in failure
    assert "waiting in allreduce" in failure


@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
def test_parallel_io_notebook_writes_one_array(executed) -> None:
    notebook = executed("09_parallel_io.ipynb")
    written = text_of(cell_with(notebook, "fh.Write_all(local)"))
    assert all(f"rank {r}: wrote 192 bytes" in written for r in range(RANKS)), written
    numpy_read = text_of(cell_with(notebook, "np.fromfile(path"))
    assert "every element in its place: True" in numpy_read, numpy_read
    mpi_read = text_of(cell_with(notebook, "fh.Read_all(back, status)"))
    for r in range(RANKS):
        assert f"rank {r}: read 24 doubles, same as written: True" in mpi_read, mpi_read


@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
def test_one_sided_notebook_teaches_epochs_and_counters(executed) -> None:
    notebook = executed("08_one_sided.ipynb")
    traced = cell_with(notebook, "win.Put(np.array([float(rank)]), right, 0)")
    ring = text_of(traced)
    for r in range(RANKS):
        assert f"rank {r}: element 0 = {(r - 1) % RANKS} (put there by rank" in ring, ring
    assert {"image/svg+xml", "text/plain"} <= mime_types(traced)
    assert f"fence epoch 1 on Allocate window, ranks 0-{RANKS - 1}: Fence at" in ring, ring
    epochs = text_of(cell_with(notebook, "for epoch in trace.epochs:"))
    for r in range(RANKS):
        assert f"rank {r}: fence epoch 1, from Fence to Fence" in epochs, epochs
        assert f"rank {r} Put → rank {(r + 1) % RANKS}: 8 B at displacement 0" in epochs, epochs
    assert f"sum of 1..{RANKS} = {RANKS * (RANKS + 1) // 2}" in text_of(
        cell_with(notebook, "win.Accumulate(np.array([rank + 1.0])")
    )
    tickets = text_of(cell_with(notebook, "tickets = []"))
    assert f"tickets drawn: {list(range(3 * RANKS))}; all distinct: True" in tickets, tickets
    assert tickets.count("lock epoch to 0 (shared) on Allocate window, rank ") == 3 * RANKS
    assert tickets.count("Fetch_and_op(SUM) ↔ rank 0: 8 B at displacement 2") == 3 * RANKS
    assert f"element 3 = {RANKS - 1}" in text_of(cell_with(notebook, "win.Post(others)"))
    steps = cell_with(notebook, "ipympi.last_trace().epoch_steps()")
    assert {"text/html", "text/plain"} <= mime_types(steps)
    walk = text_of(steps)
    assert f"{RANKS - 1} operations in {RANKS} epochs" in walk, walk
    assert (
        f"exposure epoch for 1-{RANKS - 1} on Allocate window, rank 0: Post(1-{RANKS - 1})" in walk
    )
    for r in range(1, RANKS):
        assert f"rank {r} Accumulate(MAX) → rank 0: 8 B at displacement 3" in walk, walk
    shared = text_of(cell_with(notebook, "Allocate_shared"))
    for r in range(RANKS):
        assert f"rank {r}: my memory holds {100 + (r - 1) % RANKS}" in shared, shared
    errors = text_of(cell_with(notebook, "win.Fence(MPI.MODE_NOSUCCEED)"))
    assert errors.count("ERR_RMA_SYNC? True") == RANKS, errors
