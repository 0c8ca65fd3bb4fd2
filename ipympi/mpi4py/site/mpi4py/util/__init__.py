"""``mpi4py.util`` on ipympi's ranks: :mod:`ipympi.mpi4py.util`'s modules under mpi4py's names."""
