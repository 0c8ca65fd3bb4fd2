# Types of ``mpi4py.util.sync``: those of :mod:`ipympi.util.sync`.

from ipympi.util.sync import *
