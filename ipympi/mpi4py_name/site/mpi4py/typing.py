"""``mpi4py.typing``: :mod:`ipympi.typing`."""

from ipympi.mpi4py_name import alias

alias(__name__, "ipympi.typing")
