"""``mpi4py.futures.server``: :mod:`ipympi.mpi4py.futures.server` (and ``python -m`` of it)."""

if __name__ == "__main__":
    from ipympi.mpi4py.futures.server import main

    main()
else:
    from ipympi.mpi4py import alias

    alias(__name__, "ipympi.mpi4py.futures.server")
