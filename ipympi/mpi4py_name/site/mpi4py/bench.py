"""``mpi4py.bench``: :mod:`ipympi.bench` (and ``python -m mpi4py.bench``)."""

if __name__ == "__main__":
    from ipympi.bench import main

    main()
else:
    from ipympi.mpi4py_name import alias

    alias(__name__, "ipympi.bench")
