# Types of ``mpi4py.bench``: those of :mod:`ipympi.bench`.

from ipympi.bench import *
