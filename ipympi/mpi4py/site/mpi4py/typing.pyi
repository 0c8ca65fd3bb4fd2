# Types of ``mpi4py.typing``: those of :mod:`ipympi.mpi4py.typing`.

from ipympi.mpi4py.typing import *
