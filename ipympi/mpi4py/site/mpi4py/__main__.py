"""``python -m mpi4py [options] PROGRAM [ARGS...]``, on ipympi's ranks."""

if __name__ == "__main__":
    from ipympi.mpi4py.run import main

    main()
