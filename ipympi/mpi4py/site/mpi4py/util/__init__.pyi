# ``mpi4py.util``: a package of modules, nothing of its own.
