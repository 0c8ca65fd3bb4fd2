# Types of ``mpi4py.run``: those of :mod:`ipympi.mpi4py.run`.

from ipympi.mpi4py.run import *
