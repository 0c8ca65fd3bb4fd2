# Types of ``mpi4py.bench``: those of :mod:`ipympi.mpi4py.bench`.

from ipympi.mpi4py.bench import *
