# Types of ``mpi4py.MPI``: those of :mod:`ipympi.MPI`.

from ipympi.MPI import *
