# Types of ``mpi4py.futures``: those of :mod:`ipympi.futures`.

from ipympi.futures import *
