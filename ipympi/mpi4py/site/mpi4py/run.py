"""``mpi4py.run``: ipympi's ``python -m mpi4py`` (and ``python -m mpi4py.run``)."""

if __name__ == "__main__":
    from ipympi.mpi4py.run import main

    main()
else:
    from ipympi.mpi4py import alias

    alias(__name__, "ipympi.mpi4py.run")
