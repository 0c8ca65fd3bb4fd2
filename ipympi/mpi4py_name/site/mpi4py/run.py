"""``mpi4py.run``: ipympi's ``python -m mpi4py``."""

from ipympi.mpi4py_name import alias

alias(__name__, "ipympi.mpi4py_name.run")
