"""``mpi4py.util.pkl5``: :mod:`ipympi.util.pkl5`."""

from ipympi.mpi4py_name import alias

alias(__name__, "ipympi.util.pkl5")
