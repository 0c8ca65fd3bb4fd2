"""``python -m mpi4py.futures.server``: the entry point of spawned MPI workers.

An ``MPIPoolExecutor`` outside ``python -m mpi4py.futures`` starts its workers with
``MPI.Comm.Spawn`` running this module (:func:`~._pools.spawn_pool`): each serves the
parent found with ``MPI.Comm.Get_parent`` until told to stop, then disconnects. Options,
before the serving starts: ``--path DIRS`` (``os.pathsep``-separated folders appended to
the module path) and ``--main PROGRAM...`` (the master's main program, ``file`` or ``-m
module``, imported as ``__worker__`` so that the functions it defines can be unpickled;
always last). A process started any other way has no parent: it says so and exits 1.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point for MPI workers: serve the parent job's executor."""
    from ... import MPI
    from ._worker import import_main, serve

    args = list(sys.argv[1:] if argv is None else argv)
    parent = MPI.Comm.Get_parent()
    if parent == MPI.COMM_NULL:
        sys.stderr.write(
            "mpi4py.futures.server: this process was not spawned by an MPIPoolExecutor\n"
        )
        sys.exit(1)
    if args[:1] == ["--path"] and len(args) > 1:
        sys.path.extend(p for p in args[1].split(os.pathsep) if p and p not in sys.path)
        args = args[2:]
    if args[:1] == ["--main"]:
        import_main(args[1:])
    serve(parent, MPI.COMM_WORLD, own_main=True)
    parent.Disconnect()


if __name__ == "__main__":
    main()
