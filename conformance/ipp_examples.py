"""IPython Parallel's own MPI example notebooks, to run on ipympi with the cluster line changed.

The notebooks ship in IPython Parallel's source distribution
(``docs/source/examples/``), which this module downloads with pip into a cache
(never into the repository) for the installed version of ``ipyparallel``, as
``mpi4py_suite.py`` does for mpi4py. :func:`prepared` returns one of them with
only its cluster lines changed, for one of two routes:

* ``"ipp"``: IPython Parallel's own client, with engines that are ipympi ranks
  (``ipp.Cluster(engines="ipympi", ...)``);
* ``"ipympi"``: ipympi's own client (``ipympi.Cluster(n=4).start_and_connect_sync()``).

Cells that cannot run anywhere but where the notebook was written (a Qt console,
a cluster started from a terminal beforehand) are replaced by a comment giving
the reason; cells that fail on purpose (they show an error) are tagged
``raises-exception``; a mistake of the notebook itself that fails on any engines
(a missing import) is repaired, with a comment saying so.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from typing import Any

from mpi4py_suite import default_cache

__all__ = ["NOTEBOOKS", "ROUTES", "fetch_examples", "prepared"]

ROUTES = ("ipp", "ipympi")
EXAMPLES = "docs/source/examples"
RANKS = 4


@dataclass
class Plan:
    """How one notebook runs on ipympi: its cluster lines per route, and its exceptions."""

    replace: dict[str, dict[str, str]]  # route -> {text in a cell: replacement}
    skip: dict[str, str] = field(default_factory=dict)  # text in a cell -> why it cannot run
    skip_exact: dict[str, str] = field(default_factory=dict)  # a whole cell -> why
    fails: tuple[str, ...] = ()  # text in cells that raise on purpose
    # Mistakes of the notebook itself, which fail on any engines: {old text: new text}.
    repairs: dict[str, str] = field(default_factory=dict)
    # Text in a cell -> seconds a reader lets pass before running it (a cell of its own):
    # the work the cell before it started must be under way, or the cell tests nothing.
    pauses: dict[str, float] = field(default_factory=dict)
    routes: tuple[str, ...] = ROUTES
    why_not: str = ""  # why the notebook does not run through the other route


_IPYMPI_CLIENT = "import ipympi; rc = ipympi.Cluster(n={n}).start_and_connect_sync()"
_QT = "needs a Qt console (a GUI) connected to engine 0's kernel"
_BIND = "makes IPython Parallel's engine 0 a Jupyter kernel for the Qt console of the next cell"
_TERMINAL = (
    "drives a cluster started beforehand from a terminal (ipcluster start --profile mpi "
    "--cluster-id abc-123), which the notebook does not start"
)

NOTEBOOKS: dict[str, Plan] = {
    "Using MPI with IPython Parallel.ipynb": Plan(
        replace={
            "ipp": {
                "rc = ipp.Client()": (
                    f'rc = ipp.Cluster(engines="ipympi", n={RANKS}).start_and_connect_sync()'
                )
            },
            "ipympi": {"rc = ipp.Client()": _IPYMPI_CLIENT.format(n=RANKS)},
        },
    ),
    "Monitoring an MPI Simulation - 1.ipynb": Plan(
        replace={
            "ipp": {'engines="mpi"': 'engines="ipympi"'},
            "ipympi": {
                'rc = ipp.Cluster(engines="mpi", n=n).start_and_connect_sync()': (
                    _IPYMPI_CLIENT.format(n="n")
                )
            },
        },
        skip={"bind_kernel()": _BIND, "%qtconsole": _QT},
        # Its engines use np, which none of its cells imports there (its stored outputs
        # come from cells run out of order): it fails so with engines="mpi" too.
        repairs={
            "from mpi4py import MPI\n\nmpi = MPI.COMM_WORLD": (
                "from mpi4py import MPI\nimport numpy as np  # (missing from the notebook)\n\n"
                "mpi = MPI.COMM_WORLD"
            )
        },
    ),
    "Monitoring an MPI Simulation - 2.ipynb": Plan(
        replace={"ipp": {'engines="mpi"': 'engines="ipympi"'}},
        routes=("ipp",),
        why_not=(
            "its engines publish data with ipyparallel.datapub.publish_data, a service of "
            "IPython Parallel's engines (ar.data), which ipympi's engines do not offer"
        ),
    ),
    "Cluster API.ipynb": Plan(
        replace={
            "ipp": {
                "ipp.Cluster()": 'ipp.Cluster(engines="ipympi")',
                "ipp.Cluster(n=4)": 'ipp.Cluster(n=4, engines="ipympi")',
                "ipp.Cluster(n=2)": 'ipp.Cluster(n=2, engines="ipympi")',
                "engines='MPI'": "engines='ipympi'",
            }
        },
        skip={
            "ipp.Cluster.from_file()": _TERMINAL,
            "ClusterManager()": _TERMINAL,
            "!ipcluster": _TERMINAL,
            'from_file(profile="default"': _TERMINAL,
        },
        skip_exact={"cluster": _TERMINAL, "clusters": _TERMINAL},
        fails=("ar.get()", "ar.get(timeout=2)"),
        # Its interrupt must find the engines in time.sleep(100): an engine that has not
        # begun the task yet ignores SIGINT, as IPython Parallel's engines do, and then sleeps
        # the whole 100 s (IPython Parallel's own test of signal_engines waits so too).
        pauses={"await cluster.signal_engines(signal.SIGINT)\nar.get()": 3.0},
        routes=("ipp",),
        why_not="it is about IPython Parallel's own cluster management (controllers, engine "
        "sets, cluster files)",
    ),
}


def fetch_sdist(version: str, cache: str) -> str:
    """ipyparallel ``version``'s source distribution, downloaded once with pip into ``cache``.

    Only the sdist is wanted; its build tools may come as wheels.
    """
    archive = os.path.join(cache, f"ipyparallel-{version}.tar.gz")
    if os.path.isfile(archive):
        return archive
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as download:
        command = [
            *(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"),
            *("--no-binary", "ipyparallel", "--dest", download, f"ipyparallel=={version}"),
        ]
        subprocess.run(command, check=True, timeout=600)
        (fetched,) = glob.glob(os.path.join(download, "*.tar.gz"))
        os.replace(fetched, archive)
    return archive


def fetch_examples(version: str, cache: str | None = None) -> str:
    """The folder of ipyparallel ``version``'s example notebooks (extracted once)."""
    cache = cache or default_cache()
    target = os.path.join(cache, f"ipyparallel-{version}", EXAMPLES)
    if os.path.isdir(target):
        return target
    archive = fetch_sdist(version, cache)
    prefix = f"ipyparallel-{version}/{EXAMPLES}/"
    with tempfile.TemporaryDirectory(dir=cache) as scratch, tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
        if not members:
            raise FileNotFoundError(f"ipyparallel {version}'s sdist has no {EXAMPLES}")
        tar.extractall(scratch, members=members)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(os.path.join(scratch, prefix), target)
    return target


def _pause(seconds: float) -> Any:
    """A cell of ``seconds`` of a reader's pause, saying it was added."""
    import nbformat

    lines = ["# (added for this run: a reader's pause)", "import time as _time", ""]
    source = "\n".join([*lines, f"_time.sleep({seconds})"])
    return nbformat.v4.new_code_cell(source)


def prepared(notebook: Any, name: str, route: str) -> Any:
    """``notebook`` (nbformat v4) with its cluster lines changed for ``route``, cells that
    cannot run here replaced by their reason, cells that fail on purpose tagged."""
    plan = NOTEBOOKS[name]
    if route not in plan.routes:
        raise ValueError(f"{name} does not run through {route!r}: {plan.why_not}")
    changed = set()
    cells = []
    for cell in notebook.cells:
        cells.append(cell)
        if cell.cell_type != "code":
            continue
        for text, seconds in plan.pauses.items():
            if text in cell.source:
                cells.insert(-1, _pause(seconds))
                changed.add(text)
        reason = next((why for text, why in plan.skip.items() if text in cell.source), None)
        reason = plan.skip_exact.get(cell.source.strip(), reason)
        if reason is not None:
            cell.source = f"# not run on ipympi: this cell {reason}"
            continue
        for old, new in plan.repairs.items():
            if old in cell.source:
                cell.source = cell.source.replace(old, new)
                changed.add(old)
        for old, new in plan.replace[route].items():
            if old in cell.source:
                cell.source = cell.source.replace(old, new)
                changed.add(old)
        if any(cell.source.rstrip().endswith(text) for text in plan.fails):
            cell.metadata.setdefault("tags", []).append("raises-exception")
    notebook.cells = cells
    missing = (set(plan.replace[route]) | set(plan.repairs) | set(plan.pauses)) - changed
    if missing:
        raise LookupError(f"{name} has no cell with {sorted(missing)}: has it changed?")
    return notebook
