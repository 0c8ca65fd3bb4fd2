# ``python -m mpi4py.futures``: a script, nothing to import.
