# Types of ``mpi4py.util.pool``: those of :mod:`ipympi.mpi4py.util.pool`.

from ipympi.mpi4py.util.pool import *
