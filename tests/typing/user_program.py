"""A typed MPI program: what a type checker sees of ``ipympi.MPI`` (checked by mypy in a test).

It also runs: ``python -m ipympi.run -n 2 python tests/typing/user_program.py``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from typing_extensions import assert_type

from ipympi import MPI

comm = MPI.COMM_WORLD
assert_type(comm, MPI.Intracomm)
assert_type(MPI.COMM_SELF, MPI.Intracomm)
assert_type(MPI.COMM_NULL, MPI.Comm)
rank = comm.Get_rank()
assert_type(rank, int)
assert_type(comm.Get_size(), int)
assert_type(MPI.ANY_SOURCE, int)
assert_type(MPI.ERR_TRUNCATE, int)
assert_type(MPI.SUM, MPI.Op)
assert_type(MPI.DOUBLE, MPI.Datatype)
assert_type(MPI.IN_PLACE, MPI.InPlaceType)
assert_type(MPI.Wtime(), float)

send: npt.NDArray[np.float64] = np.full(4, rank, dtype=np.float64)
recv: npt.NDArray[np.float64] = np.empty(4, dtype=np.float64)
assert_type(comm.Allreduce(send, recv, op=MPI.SUM), None)
assert_type(comm.Allreduce([send, MPI.DOUBLE], [recv, MPI.DOUBLE]), None)
assert_type(comm.Iallreduce(send, recv), MPI.Request)
request = comm.Isend(send, dest=(rank + 1) % comm.Get_size(), tag=7)
assert_type(request, MPI.Request)
status = MPI.Status()
comm.Recv(recv, source=MPI.ANY_SOURCE, tag=7, status=status)
assert_type(status.Get_source(), int)
assert_type(request.Wait(), bool)
assert_type(comm.Split(rank % 2, rank), MPI.Comm)  # as mpi4py types it
dup = comm.Dup()
assert_type(dup, MPI.Intracomm)
assert_type(dup.Idup(), tuple[MPI.Intracomm, MPI.Request])
dup.Free()
assert_type(comm.Get_group(), MPI.Group)
assert_type(MPI.DOUBLE.Get_size(), int)
cart = comm.Create_cart([comm.Get_size()], periods=[True])
assert_type(cart, MPI.Cartcomm)
assert_type(cart.Shift(0, 1), tuple[int, int])
assert_type(cart.Get_topo(), tuple[list[int], list[int], list[int]])
cart.Free()
try:
    comm.Recv([recv, -1, MPI.DOUBLE], source=MPI.PROC_NULL)
except MPI.Exception as exc:
    assert_type(exc.Get_error_class(), int)
generic: MPI.Comm = comm
generic.Bcast(send, root=0)  # the collectives are declared on Comm, as in mpi4py
if rank == 0:
    print("typed program ran on", comm.Get_size(), "ranks")
