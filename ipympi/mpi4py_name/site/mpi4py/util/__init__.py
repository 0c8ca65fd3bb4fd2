"""``mpi4py.util`` on ipympi's ranks: the modules of :mod:`ipympi.util` under mpi4py's names."""
