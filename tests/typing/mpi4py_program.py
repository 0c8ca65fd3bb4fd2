"""``from mpi4py import MPI`` on ipympi's ranks: the type checker sees ipympi's types.

Checked by mypy with ``ipympi/mpi4py/site`` on its search path (as on the ranks).
"""

import mpi4py
from mpi4py import MPI
from typing_extensions import assert_type

import ipympi.MPI

assert_type(MPI.COMM_WORLD, ipympi.MPI.Intracomm)
assert_type(MPI.COMM_WORLD.Get_rank(), int)
assert_type(MPI.SUM, ipympi.MPI.Op)
assert_type(mpi4py.__version__, str)
