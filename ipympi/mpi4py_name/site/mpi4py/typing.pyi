# Types of ``mpi4py.typing``: those of :mod:`ipympi.typing`.

from ipympi.typing import *
