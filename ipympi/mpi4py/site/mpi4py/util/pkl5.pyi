# Types of ``mpi4py.util.pkl5``: those of :mod:`ipympi.mpi4py.util.pkl5`.

from ipympi.mpi4py.util.pkl5 import *
