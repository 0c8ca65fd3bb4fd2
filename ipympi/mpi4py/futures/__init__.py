"""``mpi4py.futures``: execute computations concurrently using MPI processes.

mpi4py's interface (:class:`MPIPoolExecutor`, :class:`MPICommExecutor`,
:func:`get_comm_workers`, :func:`collect`, :func:`compose` and the names of
:mod:`concurrent.futures`), implemented on ipympi's MPI. ``MPIPoolExecutor`` spawns its
workers (``MPI.Comm.Spawn``), also from a plain ``python prog.py``; under ``python -m
ipympi.run -n N python -m mpi4py.futures prog.py`` rank 0 runs the program and ranks 1 to
N-1 serve every ``MPIPoolExecutor`` it creates; ``MPICommExecutor`` splits a communicator
into a master and workers.
"""

from concurrent.futures import (
    ALL_COMPLETED,
    FIRST_COMPLETED,
    FIRST_EXCEPTION,
    BrokenExecutor,
    CancelledError,
    Executor,
    Future,
    InvalidStateError,
    TimeoutError,
    as_completed,
    wait,
)

from ._commexec import MPICommExecutor
from ._executor import MPIPoolExecutor, ProcessPoolExecutor, ThreadPoolExecutor
from ._util import collect, compose
from ._worker import get_comm_workers

__all__ = [
    "ALL_COMPLETED",
    "FIRST_COMPLETED",
    "FIRST_EXCEPTION",
    "BrokenExecutor",
    "CancelledError",
    "Executor",
    "Future",
    "InvalidStateError",
    "MPICommExecutor",
    "MPIPoolExecutor",
    "ProcessPoolExecutor",
    "ThreadPoolExecutor",
    "TimeoutError",
    "as_completed",
    "collect",
    "compose",
    "get_comm_workers",
    "wait",
]
