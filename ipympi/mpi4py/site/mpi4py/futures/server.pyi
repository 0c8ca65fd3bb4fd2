# Types of ``mpi4py.futures.server``: those of :mod:`ipympi.mpi4py.futures.server`.

from ipympi.mpi4py.futures.server import *
