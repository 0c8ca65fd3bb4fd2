# Types of ``mpi4py.futures.server``: those of :mod:`ipympi.futures.server`.

from ipympi.futures.server import *
