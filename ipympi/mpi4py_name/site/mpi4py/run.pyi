# Types of ``mpi4py.run``: those of :mod:`ipympi.mpi4py_name.run`.

from ipympi.mpi4py_name.run import *
