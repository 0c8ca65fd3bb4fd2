# ``python -m mpi4py``: a script, nothing to import.
