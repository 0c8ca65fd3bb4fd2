# Types of ``mpi4py.futures``: those of :mod:`ipympi.mpi4py.futures`.

from ipympi.mpi4py.futures import *
