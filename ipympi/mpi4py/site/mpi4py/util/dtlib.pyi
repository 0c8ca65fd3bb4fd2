# Types of ``mpi4py.util.dtlib``: those of :mod:`ipympi.mpi4py.util.dtlib`.

from ipympi.mpi4py.util.dtlib import *
