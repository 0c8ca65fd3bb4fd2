"""``mpi4py.util``: utilities built on ipympi's MPI, with mpi4py's interfaces.

* :mod:`~ipympi.mpi4py.util.dtlib`: numpy dtypes to and from MPI datatypes.
* :mod:`~ipympi.mpi4py.util.pkl5`: communicators whose object methods use pickle protocol 5 with
  out-of-band buffers, sent as messages of their own.
* :mod:`~ipympi.mpi4py.util.pool`: :mod:`multiprocessing.pool`'s interface over executors.
* :mod:`~ipympi.mpi4py.util.sync`: sequential sections, a global counter, mutexes, condition
  variables and semaphores among the processes of a communicator.

On ipympi's ranks they are also ``mpi4py.util.*`` (see :mod:`ipympi.mpi4py`).
"""
