"""``mpi4py.bench``: :mod:`ipympi.mpi4py.bench` (and ``python -m mpi4py.bench``)."""

if __name__ == "__main__":
    from ipympi.mpi4py.bench import main

    main()
else:
    from ipympi.mpi4py import alias

    alias(__name__, "ipympi.mpi4py.bench")
