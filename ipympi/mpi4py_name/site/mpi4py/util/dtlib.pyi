# Types of ``mpi4py.util.dtlib``: those of :mod:`ipympi.util.dtlib`.

from ipympi.util.dtlib import *
