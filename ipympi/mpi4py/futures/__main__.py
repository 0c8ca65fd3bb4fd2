"""``python -m mpi4py.futures [options] PROGRAM [ARGS...]``: run a program with MPI workers.

Run under ``python -m ipympi.run -n N``. ``MPI.COMM_WORLD`` is split into a master (rank
0) and N-1 workers, connected by an intercommunicator. The master runs the program as
``python -m mpi4py`` would (same command line forms and options; an uncaught exception
aborts the job); every ``MPIPoolExecutor`` it creates shares the workers. The workers
run the program as the module ``__worker__`` (so that its functions can be unpickled)
and serve tasks until the program ends, when the master stops them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import cast

__all__ = ["main"]


def _program(args: Sequence[str]) -> list[str]:
    """The program part of ``python -m mpi4py``'s arguments (after the options)."""
    args = list(args)
    while args and args[0].startswith("-") and args[0] not in ("-", "-m", "-c"):
        option = args.pop(0)
        if option in ("-rc", "--rc") and args:
            args.pop(0)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Run the program on rank 0 of ``MPI.COMM_WORLD``; serve it on the other ranks."""
    from ... import MPI
    from .. import run
    from ._executor import shared_pool
    from ._pools import MPIPool
    from ._worker import import_main, serve

    args = list(sys.argv[1:] if argv is None else argv)
    world = MPI.COMM_WORLD
    if world.Get_size() == 1:
        run.main(args)
        return
    master = world.Get_rank() == 0
    local = cast(MPI.Intracomm, world.Split(0 if master else 1, world.Get_rank()))
    intercomm = local.Create_intercomm(0, world, 1 if master else 0)
    if not master:
        import_main(_program(args))
        serve(intercomm, local)
        return
    pool = MPIPool(intercomm)
    shared_pool.append(pool)
    try:
        run.main(args)
    finally:
        shared_pool.remove(pool)
        pool.stop(wait=True)


if __name__ == "__main__":
    main()
