"""``mpi4py.futures.server``: :mod:`ipympi.futures.server` (and ``python -m`` of it)."""

if __name__ == "__main__":
    from ipympi.futures.server import main

    main()
else:
    from ipympi.mpi4py_name import alias

    alias(__name__, "ipympi.futures.server")
