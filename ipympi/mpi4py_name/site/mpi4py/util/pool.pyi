# Types of ``mpi4py.util.pool``: those of :mod:`ipympi.util.pool`.

from ipympi.util.pool import *
