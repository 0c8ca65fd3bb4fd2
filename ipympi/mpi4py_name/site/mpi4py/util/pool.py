"""``mpi4py.util.pool``: :mod:`ipympi.util.pool`."""

from ipympi.mpi4py_name import alias

alias(__name__, "ipympi.util.pool")
