# Types of ``mpi4py.util.sync``: those of :mod:`ipympi.mpi4py.util.sync`.

from ipympi.mpi4py.util.sync import *
