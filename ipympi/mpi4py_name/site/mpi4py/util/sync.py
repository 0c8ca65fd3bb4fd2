"""``mpi4py.util.sync``: :mod:`ipympi.util.sync`."""

from ipympi.mpi4py_name import alias

alias(__name__, "ipympi.util.sync")
