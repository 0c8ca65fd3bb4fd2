"""``python -m mpi4py.futures.server``: the entry point of spawned MPI workers.

mpi4py starts an ``MPIPoolExecutor``'s workers with ``MPI.Comm.Spawn`` running this
module, which serves the parent found with ``MPI.Comm.Get_parent``. ipympi starts no
processes dynamically, so a process running it has no parent: it says so and exits
with status 1. Workers under ipympi are the ranks of ``python -m mpi4py.futures``.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    """Entry point for MPI workers: serve the parent job's executor."""
    from ... import MPI
    from ._worker import serve

    parent = MPI.Comm.Get_parent()
    if parent == MPI.COMM_NULL:
        sys.stderr.write(
            "mpi4py.futures.server: this process was not spawned by an MPIPoolExecutor "
            "(ipympi has no MPI.Comm.Spawn); run programs with "
            "'python -m ipympi.run -n N python -m mpi4py.futures prog.py' instead\n"
        )
        sys.exit(1)
    serve(parent, MPI.COMM_WORLD)


if __name__ == "__main__":
    main()
