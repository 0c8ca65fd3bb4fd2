"""``MPICommExecutor``: an executor over the processes of an existing communicator."""

from __future__ import annotations

from typing import Any, cast

from ... import MPI
from ._executor import MPIPoolExecutor, ThreadPoolExecutor, shared_pool
from ._pools import MPIPool
from ._worker import serve

__all__ = ["MPICommExecutor"]


class MPICommExecutor:
    """Context manager for `MPIPoolExecutor`.

    Entering it is collective over ``comm``: the process ``root`` becomes the master and
    gets an executor, the others become its workers (connected to it through an
    intercommunicator) and serve its tasks inside ``__enter__``, which returns ``None``
    to them once the master's executor has shut down (when the master leaves the
    ``with`` block). Over a single process, the executor runs its tasks in one thread.
    Under ``python -m mpi4py.futures``, where only the master runs the program and the
    other ranks already serve it, entering is not collective: the executor uses those
    workers, as any ``MPIPoolExecutor`` there does.

    Example::

        with MPICommExecutor(MPI.COMM_WORLD, root=0) as executor:
            if executor is not None:  # master process
                executor.submit(...)
                executor.map(...)
    """

    def __init__(self, comm: MPI.Intracomm | None = None, root: int = 0, **kwargs: Any) -> None:
        """Initialize a new MPICommExecutor instance.

        Raises ``ValueError`` if ``comm`` is not an intracommunicator or ``root`` is
        not one of its ranks. ``kwargs`` are the executor's options.
        """
        if comm is None:
            comm = MPI.COMM_WORLD
        if comm.Is_inter():
            raise ValueError("expecting an intracommunicator")
        if root < 0 or root >= comm.Get_size():
            raise ValueError("expecting root in range(comm.size)")
        self._comm = comm
        self._root = root
        self._options = kwargs
        self._executor: MPIPoolExecutor | None = None
        self._comms: list[MPI.Comm] = []

    def __enter__(self) -> MPIPoolExecutor | None:
        """Return the executor at the master; serve the tasks and return None elsewhere."""
        if self._executor is not None:
            raise RuntimeError("MPICommExecutor is not reentrant")
        comm, root = self._comm, self._root
        if shared_pool:
            self._executor = MPIPoolExecutor(**self._options)
            return self._executor
        if comm.Get_size() == 1:
            self._executor = ThreadPoolExecutor(1, **self._options)
            return self._executor
        master = comm.Get_rank() == root
        local = cast(MPI.Intracomm, comm.Split(0 if master else 1, comm.Get_rank()))
        first_worker = 1 if root == 0 else 0
        intercomm = local.Create_intercomm(0, comm, first_worker if master else root)
        self._comms = [intercomm, local]
        if not master:
            try:
                serve(intercomm, local)
            finally:
                self._free()
            return None
        options = dict(self._options)
        executor = MPIPoolExecutor(**options)
        executor._use_pool(MPIPool(intercomm, options.get("backoff")), owned=True)
        self._executor = executor
        return executor

    def __exit__(self, *exc: object) -> None:
        """Shut the executor down (the workers then return from ``__enter__``)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
            self._free()

    def _free(self) -> None:
        comms, self._comms = self._comms, []
        for comm in comms:
            comm.Free()
