# Types of ``mpi4py.util.pkl5``: those of :mod:`ipympi.util.pkl5`.

from ipympi.util.pkl5 import *
