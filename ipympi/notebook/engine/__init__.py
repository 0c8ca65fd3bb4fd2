"""Notebook engines: one IPython shell per MPI rank, started by a supervisor.

The controller kernel starts one *supervisor* process
(``python -m ipympi.notebook.engine``) that imports IPython, zmq, numpy and the MPI
core, then forks one engine per rank on request: forking a warmed-up,
single-threaded template makes a 4-rank session ready in a fraction of a
second. Each engine is an IPython shell (magics, ``!cmd``, display hooks) with
``MPI``, ``comm``, ``rank`` and ``size`` predefined; it talks to the controller
through signed messages (:mod:`ipympi.notebook.engine.protocol`).

With the mpi4py backend the engines are started by an MPI launcher instead
(``mpiexec`` or ``srun`` running :mod:`ipympi.notebook.engine.mpi4py_engine`): the
same shell on ``mpi4py.MPI``, each rank kept by a parent process that reports
how it ended (:mod:`ipympi.notebook.engine.keeper`).
"""
