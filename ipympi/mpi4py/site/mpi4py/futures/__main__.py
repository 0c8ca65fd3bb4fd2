"""``python -m mpi4py.futures [options] PROGRAM [ARGS...]`` on ipympi's ranks."""

if __name__ == "__main__":
    from ipympi.mpi4py.futures.__main__ import main

    main()
